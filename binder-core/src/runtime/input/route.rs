//! The listeners of an input binding and which one takes a message: the one conditional
//! listener whose condition matches, else the one without a condition.

use std::sync::Arc;

use super::super::error::HandlerError;
use super::super::handler::Handler;
use super::super::output::OutputInner;
use super::super::spel::syntax::ast::Condition;
use crate::message::Message;

/// One listener of an input binding: its condition, handler and reply output.
pub(crate) struct Route {
    pub name: String,
    pub condition: Option<Condition>,
    pub handler: Arc<dyn Handler>,
    pub output: Option<Arc<OutputInner>>,
}

/// The listeners of one input binding.
pub(crate) struct Routes {
    binding: Arc<str>,
    routes: Vec<Route>,
}

impl Routes {
    /// The listeners of `binding` (at least one).
    pub(crate) fn new(binding: Arc<str>, routes: Vec<Route>) -> Self {
        Routes { binding, routes }
    }

    /// The first listener: a `batchMode` binding's only one.
    pub(crate) fn only(&self) -> &Route {
        &self.routes[0]
    }

    /// The listener for a message. None matching, or several, is a failure (never a
    /// silent drop).
    pub(crate) fn choose(&self, message: &Message) -> Result<&Route, HandlerError> {
        if self.routes.len() == 1 && self.routes[0].condition.is_none() {
            return Ok(&self.routes[0]);
        }
        let header = |name: &str| message.headers.get(name).map(|v| v.to_string());
        let matching: Vec<&Route> = self
            .routes
            .iter()
            .filter(|r| r.condition.as_ref().is_some_and(|c| c.matches(&header)))
            .collect();
        match matching.as_slice() {
            [one] => Ok(one),
            [] => self
                .routes
                .iter()
                .find(|r| r.condition.is_none())
                .ok_or_else(|| {
                    HandlerError::fatal(format!(
                        "no listener of binding `{}` accepts this message (their conditions: {})",
                        self.binding,
                        self.names(&self.routes.iter().collect::<Vec<_>>())
                    ))
                }),
            several => Err(HandlerError::fatal(format!(
                "the conditions of several listeners of binding `{}` match this message: {}",
                self.binding,
                self.names(several)
            ))),
        }
    }

    fn names(&self, routes: &[&Route]) -> String {
        routes
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
