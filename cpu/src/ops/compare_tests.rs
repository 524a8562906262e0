#![allow(clippy::panic)]
use crate::test_support::*;
