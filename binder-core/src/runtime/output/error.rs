//! Why an output cannot open, and why a send failed.

use super::super::binders::BinderLookupError;
use super::super::partition::UnhashableKey;
use super::super::spel::expression::ExpressionError;
use crate::binder::BinderError;
use crate::codec::EncodeError;

/// Why an output binding cannot open.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// `producer.errorChannelEnabled` is set: failed sends are returned to their caller.
    #[error(
        "binding `{binding}`: producer.errorChannelEnabled is not supported: a failed send is returned to its caller as a `SendError`, and consumer failures reach the `on_error` hook (`AppBuilder::on_error`)"
    )]
    ErrorChannel {
        /// The binding.
        binding: String,
    },
    /// `partitionSelectorExpression` is set: only the default selector exists.
    #[error(
        "binding `{binding}`: partitionSelectorExpression is not supported; the default selector (the key's Java hash modulo partitionCount) is used when it is unset"
    )]
    PartitionSelector {
        /// The binding.
        binding: String,
    },
    /// `partitionKeyExpression` does not parse.
    #[error("binding `{binding}`: {property}: {source}")]
    Expression {
        /// The binding.
        binding: String,
        /// The property (`partitionKeyExpression`).
        property: &'static str,
        /// Why it does not parse.
        source: ExpressionError,
    },
    /// Provisioning its topology or opening its producer failed.
    #[error("binding `{binding}`: {source}")]
    Binder {
        /// The binding.
        binding: String,
        /// The binder's error.
        source: BinderError,
    },
    /// No binder could be had for it (a dynamic destination).
    #[error(transparent)]
    Lookup(Box<BinderLookupError>),
}

/// Why a send failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The payload could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The partition key expression could not be evaluated on the message.
    #[error("partition key of binding `{binding}`: {source}")]
    PartitionKeyExpression {
        /// The output binding.
        binding: String,
        /// Why.
        source: Box<ExpressionError>,
    },
    /// The partition key has no hash Spring would compute.
    #[error(
        "partition key of binding `{binding}`: partitionKeyExpression `{expression}`: {source}"
    )]
    PartitionKey {
        /// The output binding.
        binding: String,
        /// The partition key expression.
        expression: String,
        /// Why the key cannot be hashed.
        source: Box<UnhashableKey>,
    },
    /// The destination is not in `spring.cloud.stream.dynamicDestinations`.
    #[error(
        "destination `{destination}` is not in spring.cloud.stream.dynamicDestinations ({})",
        allowed.join(", ")
    )]
    NotAllowed {
        /// The destination asked for.
        destination: String,
        /// The destinations allowed.
        allowed: Vec<String>,
    },
    /// A dynamic destination could not be opened.
    #[error(transparent)]
    Open(Box<OutputError>),
    /// The binding is stopped.
    #[error("binding `{0}` is stopped")]
    Stopped(String),
    /// The binder failed or did not confirm.
    #[error(transparent)]
    Binder(#[from] BinderError),
}

impl From<BinderLookupError> for OutputError {
    fn from(e: BinderLookupError) -> Self {
        OutputError::Lookup(Box::new(e))
    }
}

impl From<OutputError> for SendError {
    fn from(e: OutputError) -> Self {
        SendError::Open(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_result_stays_small() {
        // Every send returns one, and the future of every delivery with a reply holds one:
        // the variants of this crate's own causes are boxed, so it is no larger than the
        // errors of the codec and the binder it carries inline, and a tag.
        use std::mem::size_of;
        assert!(
            size_of::<SendError>() <= size_of::<EncodeError>().max(size_of::<BinderError>()) + 8,
            "{} {} {}",
            size_of::<SendError>(),
            size_of::<EncodeError>(),
            size_of::<BinderError>(),
        );
    }
}
