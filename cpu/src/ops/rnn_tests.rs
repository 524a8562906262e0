use crate::test_support::*;
