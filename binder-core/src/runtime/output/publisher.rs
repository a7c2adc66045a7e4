//! The dynamic publisher (SCSt's `StreamBridge`): sends to any output binding by name, or
//! to a destination not configured in advance.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{Mutex, OnceCell};

use super::super::binders::Binders;
use super::super::observe::Observers;
use super::binding::OutputInner;
use super::error::{OutputError, SendError};
use crate::binder::BindingRole;
use crate::codec::Codecs;
use crate::config::StreamConfig;
use crate::message::Message;

/// A dynamic destination's output, opened by the first send to it.
pub(crate) type DynamicOutput = Arc<OnceCell<Arc<OutputInner>>>;

/// Sends to any output binding by name, or to a destination not configured in advance,
/// with the same routing, confirms and trace propagation (SCSt's `StreamBridge`). Producers
/// for new destinations are created once and kept, however many there are.
///
/// Each new destination opens on its own: one whose producer cannot open yet (its broker
/// is unreachable) holds up only the sends to it, and concurrent first sends to one
/// destination wait for a single producer rather than opening one each.
#[derive(Debug, Clone)]
pub struct Publisher {
    pub(crate) outputs: Arc<HashMap<String, Arc<OutputInner>>>,
    /// The dynamic destinations, each opened once; the map's lock is held only to find or
    /// add a destination, never while one opens.
    pub(crate) dynamic: Arc<Mutex<HashMap<String, DynamicOutput>>>,
    pub(crate) config: Arc<StreamConfig>,
    pub(crate) binders: Arc<Binders>,
    pub(crate) codecs: Arc<Codecs>,
    pub(crate) observers: Observers,
}

impl Publisher {
    async fn resolve(&self, target: &str) -> Result<Arc<OutputInner>, SendError> {
        if let Some(o) = self.outputs.get(target) {
            return Ok(o.clone());
        }
        let cell = {
            let mut dynamic = self.dynamic.lock().await;
            match dynamic.get(target) {
                Some(cell) => cell.clone(),
                None => {
                    let allowed = &self.config.dynamic_destinations;
                    if !allowed.is_empty() && !allowed.iter().any(|d| d == target) {
                        return Err(SendError::NotAllowed {
                            destination: target.to_owned(),
                            allowed: allowed.clone(),
                        });
                    }
                    let cell = Arc::new(OnceCell::new());
                    dynamic.insert(target.to_owned(), cell.clone());
                    cell
                }
            }
        };
        // Outside the map's lock. The first send opens the destination and the others wait
        // for it; if it fails (or its send is dropped), the next waiting send tries again.
        cell.get_or_try_init(|| self.open(target))
            .await
            .map(Arc::clone)
    }

    /// Opens a dynamic destination: its binding (configured or default), topology and
    /// producer.
    async fn open(&self, target: &str) -> Result<Arc<OutputInner>, SendError> {
        let binding = self.config.binding(target);
        let binder = self
            .binders
            .for_binding(&self.config, target)
            .map_err(OutputError::from)?;
        let output = OutputInner::open(
            &binding,
            &binder,
            self.codecs.clone(),
            &Default::default(),
            self.observers.clone(),
        )
        .await?;
        binder.bound(&binding, BindingRole::Producer);
        Ok(Arc::new(output))
    }

    /// Encodes and sends `payload` to a binding or destination.
    pub async fn send<T: Serialize + ?Sized>(
        &self,
        binding_or_destination: &str,
        payload: &T,
    ) -> Result<(), SendError> {
        self.resolve(binding_or_destination)
            .await?
            .send(payload)
            .await
    }

    /// Sends a ready message to a binding or destination.
    pub async fn send_message(
        &self,
        binding_or_destination: &str,
        message: Message,
    ) -> Result<(), SendError> {
        self.resolve(binding_or_destination)
            .await?
            .send_message(message)
            .await
    }
}
