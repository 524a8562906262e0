//! `nnaccel-tflite`: TensorFlow Lite models into nnaccel.
//!
//! A `.tflite` file is read ([`read`]) into one graph form ([`graph`]), the same form the
//! external delegate (`driver/tflite/delegate`) builds from the `TfLiteContext` LiteRT hands
//! it; [`lower`] turns that form (a whole subgraph, or the nodes of one delegate partition)
//! into an NN HAL [`nnaccel_hal::Model`], mapping each builtin operation as NNAPI's own TFLite
//! delegate does. An operation without an NNAPI equivalent is an error naming it and its node
//! index: nothing is dropped silently.
//!
//! It sits on top of the client library (`nnaccel-protocol`) and the HAL's types; the service,
//! the simulated device and the CLI are not its business (docs/tflite.md).

pub mod graph;
pub mod lower;
