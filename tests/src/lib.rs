//! Integration test support (being written).
