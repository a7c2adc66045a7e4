//! One output binding, ready to send, and its public sender.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use super::super::observe::{Observers, Sent};
use super::super::patience::{Patience, when_reachable};
use super::super::trace;
use super::error::{OutputError, SendError};
use super::partitioning::{self, Partitioning};
use crate::binder::{Binder, Producer};
use crate::codec::Codecs;
use crate::config::BindingConfig;
use crate::message::{Headers, Message, Properties, SharedProperties};

/// One output binding, ready to send.
#[derive(Debug)]
pub(crate) struct OutputInner {
    pub binding: String,
    producer: Box<dyn Producer>,
    content_type: Arc<str>,
    /// The properties every message sent without any gets: the binding's content type and
    /// what the producer sets (its delivery mode), one allocation shared by them all.
    properties: SharedProperties,
    partitioning: Option<Partitioning>,
    codecs: Arc<Codecs>,
    observers: Observers,
    pub stopped: AtomicBool,
}

impl OutputInner {
    /// Builds an output from its binding: the binder prepares its destination and opens a
    /// producer.
    pub(crate) async fn open(
        binding: &BindingConfig,
        binder: &Arc<dyn Binder>,
        codecs: Arc<Codecs>,
        patience: &Patience,
        observers: Observers,
    ) -> Result<Self, OutputError> {
        partitioning::refused(binding)?;
        let partitioning = Partitioning::of(binding)?;
        let what = format!("binding `{}`", binding.name);
        let producer = when_reachable(&what, patience, || binder.bind_producer(binding))
            .await
            .map_err(|source| OutputError::Binder {
                binding: binding.name.clone(),
                source,
            })?;
        let content_type: Arc<str> = Arc::from(binding.content_type.as_str());
        let mut properties = Properties {
            content_type: Some(content_type.clone()),
            ..Properties::default()
        };
        producer.complete_properties(&mut properties);
        Ok(OutputInner {
            binding: binding.name.clone(),
            producer,
            content_type,
            properties: properties.into(),
            partitioning,
            codecs,
            observers,
            stopped: AtomicBool::new(!binding.producer.auto_startup),
        })
    }

    pub(crate) async fn send_message(&self, mut message: Message) -> Result<(), SendError> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(SendError::Stopped(self.binding.clone()));
        }
        if !message.properties.is_allocated() {
            message.properties = self.properties.clone();
        } else if message.properties.content_type.is_none() {
            message.properties.content_type = Some(self.content_type.clone());
        }
        trace::propagate(&mut message);
        let partition = match &self.partitioning {
            Some(p) => Some(p.partition(&message)?),
            None => None,
        };
        // A binder may confirm at once (the embedded one does): a sender looping on such
        // sends would never yield, and the consumers it feeds on its worker would starve.
        tokio::task::coop::consume_budget().await;
        let started = self.observers.clock();
        let published = self.producer.publish(message, partition).await;
        if let Some(started) = started {
            let latency = self.observers.elapsed(started);
            self.observers.emit(|o| {
                o.sent(&Sent {
                    binding: &self.binding,
                    binding_index: self.observers.binding_index(),
                    partition,
                    latency,
                    error: published.as_ref().err(),
                })
            });
        }
        published?;
        Ok(())
    }

    pub(crate) async fn send<T: Serialize + ?Sized>(&self, payload: &T) -> Result<(), SendError> {
        let bytes = self.encode(payload)?;
        self.send_message(Message {
            payload: bytes,
            headers: Headers::new(),
            properties: self.properties.clone(),
        })
        .await
    }

    /// `payload` encoded with the binding's content type.
    pub(crate) fn encode<T: Serialize + ?Sized>(
        &self,
        payload: &T,
    ) -> Result<bytes::Bytes, SendError> {
        Ok(self.codecs.encode(&self.content_type, payload)?)
    }
}

/// An output binding's sender. Cheap to clone. Each send waits for the broker's confirm; for
/// many sends in flight from one task, see [`Output::pipeline`] and [`Output::send_all`].
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
