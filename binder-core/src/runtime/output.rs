//! Sending: output bindings and the dynamic publisher (SCSt's `StreamBridge`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use tokio::sync::{Mutex, OnceCell};

use super::error::SendError;
use super::expression::RoutingKeyExpression;
use super::partition;
use super::trace;
use crate::binder::{Binder, Producer, ProducerSpec};
use crate::codec::Codecs;
use crate::config::{BindingConfig, StreamConfig};
use crate::message::Message;
use crate::topology::plan_producer;

/// How an output chooses routing keys.
#[derive(Debug)]
pub(crate) enum Routing {
    /// A fixed key (`routingKey`, or the destination by default).
    Fixed(String),
    /// `routingKeyExpression`.
    Expression(RoutingKeyExpression),
}

/// Partitioning of a producer (`partitionKeyExpression`, `partitionCount`).
#[derive(Debug)]
struct Partitioning {
    key: RoutingKeyExpression,
    count: u32,
}

/// One output binding, ready to send.
#[derive(Debug)]
pub(crate) struct OutputInner {
    pub binding: String,
    destination: String,
    producer: Box<dyn Producer>,
    content_type: Arc<str>,
    routing: Routing,
    partitioning: Option<Partitioning>,
    codecs: Arc<Codecs>,
    pub stopped: AtomicBool,
}

impl OutputInner {
    /// Builds an output from its binding: provisions its topology and opens a producer.
    pub(crate) async fn open(
        binding: &BindingConfig,
        binder: &Arc<dyn Binder>,
        codecs: Arc<Codecs>,
        patience: &super::app::Patience,
    ) -> Result<Self, String> {
        Self::refused(binding)?;
        let routing = Self::routing(binding)?;
        let partitioning = Self::partitioning(binding)?;
        let topology = plan_producer(binding);
        let what = format!("binding `{}`", binding.name);
        super::app::when_reachable(&what, patience, || binder.provision(&topology.plan))
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        let spec = ProducerSpec {
            exchange: topology.exchange.clone(),
            delivery_mode: binding.rabbit_producer.delivery_mode,
        };
        let producer =
            super::app::when_reachable(&what, patience, || binder.producer(spec.clone()))
                .await
                .map_err(|e| format!("{what}: {e}"))?;
        Ok(OutputInner {
            binding: binding.name.clone(),
            destination: binding.destination.clone(),
            producer,
            content_type: Arc::from(binding.content_type.as_str()),
            routing,
            partitioning,
            codecs,
            stopped: AtomicBool::new(!binding.producer.auto_startup),
        })
    }

    /// Whether a binding can be an output (checked at startup): its settings are not refused
    /// and its routing parses.
    pub(crate) fn check(binding: &BindingConfig) -> Result<(), String> {
        Self::refused(binding)?;
        Self::routing(binding).map(drop)
    }

    /// The producer settings that are refused rather than ignored.
    fn refused(binding: &BindingConfig) -> Result<(), String> {
        if binding.producer.error_channel_enabled {
            return Err(format!(
                "binding `{}`: producer.errorChannelEnabled is not supported: a failed send is returned to its caller as a `SendError`, and consumer failures reach the `on_error` hook (`AppBuilder::on_error`)",
                binding.name
            ));
        }
        Ok(())
    }

    /// The routing of a binding (its key, or the expression that computes it).
    fn routing(binding: &BindingConfig) -> Result<Routing, String> {
        let p = &binding.rabbit_producer;
        Ok(match (&p.routing_key_expression, &p.routing_key) {
            (Some(expr), _) => {
                Routing::Expression(RoutingKeyExpression::parse(expr).map_err(|e| {
                    format!("binding `{}`: routingKeyExpression: {e}", binding.name)
                })?)
            }
            (None, Some(key)) => Routing::Fixed(key.clone()),
            (None, None) => Routing::Fixed(binding.destination.clone()),
        })
    }

    fn partitioning(binding: &BindingConfig) -> Result<Option<Partitioning>, String> {
        let p = &binding.producer;
        if p.partition_selector_expression.is_some() {
            return Err(format!(
                "binding `{}`: partitionSelectorExpression is not supported; the default selector (the key's Java hash modulo partitionCount) is used when it is unset",
                binding.name
            ));
        }
        let Some(expr) = &p.partition_key_expression else {
            return Ok(None);
        };
        let key = RoutingKeyExpression::parse(expr)
            .map_err(|e| format!("binding `{}`: partitionKeyExpression: {e}", binding.name))?;
        Ok(Some(Partitioning {
            key,
            count: p.partition_count,
        }))
    }

    fn routing_key(&self, message: &Message) -> Result<Cow<'_, str>, SendError> {
        let fail = |reason: String| SendError::RoutingKey {
            binding: self.binding.clone(),
            reason,
        };
        let base = match &self.routing {
            Routing::Fixed(k) => Cow::Borrowed(k.as_str()),
            Routing::Expression(e) => {
                Cow::Owned(e.evaluate(message).map_err(|e| fail(e.to_string()))?)
            }
        };
        match &self.partitioning {
            None => Ok(base),
            Some(p) => {
                let key = p
                    .key
                    .evaluate_key(message)
                    .map_err(|e| fail(e.to_string()))?;
                let hash = partition::java_hash(&key)
                    .map_err(|e| fail(format!("partitionKeyExpression `{}`: {e}", p.key)))?;
                let partition = partition::partition_of(hash, p.count);
                // As SCSt: `<destination>-<n>` unless a routing key was configured.
                let base = match &self.routing {
                    Routing::Fixed(k) if *k == self.destination => self.destination.as_str(),
                    _ => base.as_ref(),
                };
                Ok(Cow::Owned(format!("{base}-{partition}")))
            }
        }
    }

    pub(crate) async fn send_message(&self, mut message: Message) -> Result<(), SendError> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(SendError::Stopped(self.binding.clone()));
        }
        if message.properties.content_type.is_none() {
            message.properties.content_type = Some(self.content_type.clone());
        }
        trace::propagate(&mut message);
        let key = self.routing_key(&message)?;
        // A binder may confirm at once (the embedded one does): a sender looping on such
        // sends would never yield, and the consumers it feeds on its worker would starve.
        tokio::task::coop::consume_budget().await;
        self.producer.publish(&key, message).await?;
        Ok(())
    }

    pub(crate) async fn send<T: Serialize + ?Sized>(&self, payload: &T) -> Result<(), SendError> {
        let bytes = self.codecs.encode(&self.content_type, payload)?;
        self.send_message(Message::new(bytes).with_content_type(self.content_type.clone()))
            .await
    }
}

/// An output binding's sender. Cheap to clone. Each send waits for the broker's confirm.
#[derive(Debug, Clone)]
pub struct Output {
    pub(crate) inner: Arc<OutputInner>,
}

impl Output {
    /// The binding name.
    pub fn binding(&self) -> &str {
        &self.inner.binding
    }

    /// Encodes `payload` with the binding's content type and sends it.
    pub async fn send<T: Serialize + ?Sized>(&self, payload: &T) -> Result<(), SendError> {
        self.inner.send(payload).await
    }

    /// Sends a ready message (its content type is set to the binding's if missing).
    pub fn send_message(
        &self,
        message: Message,
    ) -> impl Future<Output = Result<(), SendError>> + Send + '_ {
        // Not an `async fn`: that would hold the message twice, beside the send it moves into.
        self.inner.send_message(message)
    }
}

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
    pub(crate) binders: Arc<super::app::Binders>,
    pub(crate) codecs: Arc<Codecs>,
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
                        return Err(SendError::Destination(format!(
                            "destination `{target}` is not in spring.cloud.stream.dynamicDestinations ({})",
                            allowed.join(", ")
                        )));
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
            .map_err(SendError::Destination)?;
        let output = OutputInner::open(&binding, &binder, self.codecs.clone(), &Default::default())
            .await
            .map_err(SendError::Destination)?;
        binder.bound(&binding, crate::topology::BindingRole::Producer);
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
