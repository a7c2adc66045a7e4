//! Input bindings: the loop that consumes each queue ([`queue_loop`]), the listener a
//! message goes to ([`route`]), a delivery's attempts, retries and settlement
//! ([`delivery`]), a batch's ([`batch`]), and the failure policy, decided once per binding
//! ([`failure`]).

pub(crate) mod batch;
pub(crate) mod delivery;
pub(crate) mod failure;
pub(crate) mod queue_loop;
pub(crate) mod route;

pub use failure::{ErrorHook, Failure, FailureAction};
