//! The HAL (being written).
