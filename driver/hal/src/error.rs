//! Every error type of the HAL mapped to the NN HAL status a client sees, in one place. The
//! layers return typed errors (`thiserror` enums); a status is made from one only where a HAL
//! call answers, and the error's text goes to the log or into the service's error frame.
//!
//! | error | status |
//! |---|---|
//! | [`ValidationError`]: a model or request breaks a HAL rule | INVALID_ARGUMENT |
//! | [`DomainError::Invalid`]: a memory-domain rule is broken | INVALID_ARGUMENT |
//! | [`DomainError::Failed`]: the driver cannot allocate or copy | GENERAL_FAILURE |
//! | [`CacheError`]: a cache that cannot be read, matched or decoded | GENERAL_FAILURE |
//! | [`BurstError`]: a burst packet or callback exchange that cannot be served | GENERAL_FAILURE |

use crate::burst::BurstError;
use crate::cache::CacheError;
use crate::domain::DomainError;
use crate::types::ErrorStatus;
use crate::validate::ValidationError;

impl From<&ValidationError> for ErrorStatus {
    fn from(_: &ValidationError) -> Self {
        ErrorStatus::InvalidArgument
    }
}

impl From<&DomainError> for ErrorStatus {
    fn from(e: &DomainError) -> Self {
        match e {
            DomainError::Invalid(_) => ErrorStatus::InvalidArgument,
            DomainError::Failed(_) => ErrorStatus::GeneralFailure,
        }
    }
}

impl From<&CacheError> for ErrorStatus {
    /// NN HAL 1.2: prepareModelFromCache answers GENERAL_FAILURE for any cache it cannot use
    /// (and a cache that cannot be saved never fails a preparation).
    fn from(_: &CacheError) -> Self {
        ErrorStatus::GeneralFailure
    }
}

impl From<&BurstError> for ErrorStatus {
    /// A burst packet that cannot be served is GENERAL_FAILURE (invalid requests inside a
    /// well-formed packet are INVALID_ARGUMENT, decided by request validation).
    fn from(_: &BurstError) -> Self {
        ErrorStatus::GeneralFailure
    }
}

/// The owned forms, for `?` and `map_err(ErrorStatus::from)`.
macro_rules! from_owned {
    ($($t:ty),*) => {$(
        impl From<$t> for ErrorStatus {
            fn from(e: $t) -> Self {
                ErrorStatus::from(&e)
            }
        }
    )*};
}
from_owned!(ValidationError, DomainError, CacheError, BurstError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_violations_are_invalid_argument_and_driver_failures_general_failure() {
        let s = |e: ErrorStatus| e;
        assert_eq!(
            s(ValidationError("x".into()).into()),
            ErrorStatus::InvalidArgument
        );
        assert_eq!(
            s(DomainError::Invalid("x".into()).into()),
            ErrorStatus::InvalidArgument
        );
        assert_eq!(
            s(DomainError::Failed("x".into()).into()),
            ErrorStatus::GeneralFailure
        );
        assert_eq!(s(CacheError::Mismatch.into()), ErrorStatus::GeneralFailure);
        assert_eq!(s(BurstError::NoDatum.into()), ErrorStatus::GeneralFailure);
    }
}
