//! Channel-level methods: channel, exchange, queue, basic, confirm and tx, each mapped to the
//! engine after the user's permissions are checked as RabbitMQ checks them.

use std::collections::HashMap;
use std::sync::Arc;

use amq_protocol::protocol::{AMQPClass, access, basic, channel, confirm, exchange, queue, tx};
use bytes::BytesMut;
use stream_engine::{ConsumeOptions, ExchangeKind, ExchangeOptions, QueueOptions};
use tokio::sync::watch;

use crate::auth::{Access, Resource};
use crate::connection::{Assembly, ChannelState, Conn, Slot};
use crate::consumer::pump;
use crate::convert::{short, table_from_wire};
use crate::envelope::WireEnvelope;
use crate::registry::ListedChannel;
use crate::reply::{self, Close, Fault};
use crate::wire::Encoder;

impl<E: WireEnvelope> Conn<E> {
    /// Handles a method on a channel other than 0.
    pub async fn on_channel_method(
        &mut self,
        id: u16,
        method: AMQPClass,
        ids: (u16, u16),
    ) -> Result<(), Fault> {
        match (&method, self.channels.get(&id)) {
            (AMQPClass::Channel(channel::AMQPMethod::Open(_)), None) => {
                return self.channel_open(id, ids).await;
            }
            (AMQPClass::Channel(channel::AMQPMethod::Open(_)), Some(_)) => {
                return Err(Fault::Connection(
                    Close::new(reply::CHANNEL_ERROR, "second 'channel.open' seen").on(ids),
                ));
            }
            (AMQPClass::Channel(channel::AMQPMethod::CloseOk(_)), Some(Slot::Closing)) => {
                self.channels.remove(&id);
                return Ok(());
            }
            (AMQPClass::Channel(channel::AMQPMethod::Close(_)), Some(Slot::Closing)) => {
                // Both sides closed at once: answer, and keep the channel closing until the
                // client's close-ok for our close arrives (as RabbitMQ does), so that frame
                // is not taken for a method on a channel never opened.
                return self.reply(id, channel_close_ok()).await;
            }
            (_, Some(Slot::Closing)) => return Ok(()),
            (_, None) => {
                return Err(Fault::Connection(
                    Close::new(
                        reply::CHANNEL_ERROR,
                        format!("expected 'channel.open' on channel {id}"),
                    )
                    .on(ids),
                ));
            }
            (_, Some(Slot::Open(_))) => {}
        }
        let result = self.dispatch(id, method, ids).await;
        match result {
            Err(Fault::Channel(ch, close)) if close.class_id == 0 => {
                Err(Fault::Channel(ch, close.on(ids)))
            }
            other => other,
        }
    }

    async fn channel_open(&mut self, id: u16, ids: (u16, u16)) -> Result<(), Fault> {
        let open = self.channels.len();
        if open >= usize::from(self.channel_max) {
            return Err(Fault::Connection(
                Close::new(
                    reply::NOT_ALLOWED,
                    format!(
                        "number of channels opened ({open}) has reached the negotiated channel_max ({})",
                        self.channel_max
                    ),
                )
                .on(ids),
            ));
        }
        if id > self.channel_max {
            return Err(Fault::Connection(
                Close::new(
                    reply::NOT_ALLOWED,
                    format!(
                        "channel number {id} is above the negotiated channel_max {}",
                        self.channel_max
                    ),
                )
                .on(ids),
            ));
        }
        let Some(connection) = &self.engine else {
            return Err(Fault::connection(
                reply::CHANNEL_ERROR,
                "the connection is closing",
            ));
        };
        let engine = connection
            .open_numbered_channel(id)
            .map_err(|e| Fault::engine(id, e, ids))?;
        let Some(events) = engine.events() else {
            return Err(Fault::connection(
                reply::INTERNAL_ERROR,
                "channel events taken",
            ));
        };
        let (flow, _) = watch::channel(true);
        let pending_confirms = Arc::default();
        let confirmed = Arc::default();
        self.list_channel(
            id,
            ListedChannel {
                engine_id: engine.id(),
                unconfirmed: Arc::clone(&pending_confirms),
                confirmed: Arc::clone(&confirmed),
            },
        );
        self.channels.insert(
            id,
            Slot::Open(Box::new(ChannelState {
                engine,
                events,
                assembly: None,
                flow,
                consumers: HashMap::new(),
                acks: None,
                pending_confirms,
                confirmed,
                last_queue: None,
            })),
        );
        self.reply(
            id,
            AMQPClass::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})),
        )
        .await
    }

    async fn reply(&mut self, id: u16, method: AMQPClass) -> Result<(), Fault> {
        self.send_method(id, method).await
    }

    fn state(&mut self, id: u16) -> Result<&mut ChannelState<E>, Fault> {
        match self.channels.get_mut(&id) {
            Some(Slot::Open(state)) => Ok(state),
            _ => Err(Fault::connection(
                reply::CHANNEL_ERROR,
                "channel is not open",
            )),
        }
    }

    fn check(&self, id: u16, access: Access, resource: Resource, name: &str) -> Result<(), Fault> {
        self.user
            .check(&self.vhost, access, resource, name)
            .map_err(|text| Fault::Channel(id, Close::new(reply::ACCESS_REFUSED, text)))
    }

    /// [`User::check_declared_targets`](crate::auth::User::check_declared_targets) of a
    /// declaration, refused as [`Self::check`] refuses.
    fn check_targets(
        &self,
        id: u16,
        resource: Resource,
        name: &str,
        arguments: &stream_engine::FieldTable,
    ) -> Result<(), Fault> {
        self.user
            .check_declared_targets(&self.vhost, resource, name, arguments)
            .map_err(|text| Fault::Channel(id, Close::new(reply::ACCESS_REFUSED, text)))
    }

    /// An empty queue name means the channel's last declared queue, as in RabbitMQ.
    fn queue_name(&mut self, id: u16, name: &str) -> Result<String, Fault> {
        if !name.is_empty() {
            return Ok(name.to_owned());
        }
        self.state(id)?.last_queue.clone().ok_or_else(|| {
            Fault::Channel(
                id,
                Close::new(404, "no previously declared queue".to_owned()),
            )
        })
    }

    async fn dispatch(&mut self, id: u16, method: AMQPClass, ids: (u16, u16)) -> Result<(), Fault> {
        let engine_err = |e| Fault::engine(id, e, ids);
        match method {
            AMQPClass::Channel(m) => match m {
                channel::AMQPMethod::Close(_) => {
                    self.flush_acks().await?;
                    self.drop_channel(id).await;
                    self.reply(id, channel_close_ok()).await
                }
                channel::AMQPMethod::CloseOk(_) => Ok(()),
                channel::AMQPMethod::Flow(f) => {
                    let state = self.state(id)?;
                    state.flow.send_replace(f.active);
                    self.reply(
                        id,
                        AMQPClass::Channel(channel::AMQPMethod::FlowOk(channel::FlowOk {
                            active: f.active,
                        })),
                    )
                    .await
                }
                _ => Err(Fault::Connection(
                    Close::new(
                        reply::COMMAND_INVALID,
                        "channel method not valid from a client",
                    )
                    .on(ids),
                )),
            },
            AMQPClass::Access(access::AMQPMethod::Request(_)) => {
                self.reply(
                    id,
                    AMQPClass::Access(access::AMQPMethod::RequestOk(access::RequestOk {})),
                )
                .await
            }
            AMQPClass::Exchange(m) => self.exchange_method(id, m, ids).await,
            AMQPClass::Queue(m) => self.queue_method(id, m, ids).await,
            AMQPClass::Basic(m) => self.basic_method(id, m, ids).await,
            AMQPClass::Confirm(confirm::AMQPMethod::Select(s)) => {
                self.state(id)?
                    .engine
                    .confirm_select()
                    .map_err(engine_err)?;
                if s.nowait {
                    return Ok(());
                }
                self.reply(
                    id,
                    AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {})),
                )
                .await
            }
            AMQPClass::Tx(m) => {
                let state = self.state(id)?;
                let ok = match m {
                    tx::AMQPMethod::Select(_) => {
                        state.engine.tx_select().map_err(engine_err)?;
                        tx::AMQPMethod::SelectOk(tx::SelectOk {})
                    }
                    tx::AMQPMethod::Commit(_) => {
                        // Answered once the store has the committed persistent messages.
                        state.engine.tx_commit().await.map_err(engine_err)?;
                        // Returns of the committed publishes go first.
                        self.drain_events(id).await?;
                        tx::AMQPMethod::CommitOk(tx::CommitOk {})
                    }
                    tx::AMQPMethod::Rollback(_) => {
                        state.engine.tx_rollback().map_err(engine_err)?;
                        tx::AMQPMethod::RollbackOk(tx::RollbackOk {})
                    }
                    _ => return Err(invalid(ids)),
                };
                self.reply(id, AMQPClass::Tx(ok)).await
            }
            _ => Err(invalid(ids)),
        }
    }

    async fn exchange_method(
        &mut self,
        id: u16,
        m: exchange::AMQPMethod,
        ids: (u16, u16),
    ) -> Result<(), Fault> {
        let engine_err = |e| Fault::engine(id, e, ids);
        let (nowait, ok) = match m {
            exchange::AMQPMethod::Declare(d) => {
                let name = d.exchange.as_str();
                let kind = match ExchangeKind::from_name(d.kind.as_str()) {
                    Some(kind) => kind,
                    // A passive declare does not look at the type.
                    None if d.passive => ExchangeKind::Direct,
                    None => {
                        let other = d.kind.as_str();
                        return Err(Fault::Connection(
                            Close::new(
                                reply::COMMAND_INVALID,
                                format!("unknown exchange type '{other}'"),
                            )
                            .on(ids),
                        ));
                    }
                };
                let arguments = table_from_wire(&d.arguments);
                if !d.passive {
                    self.check(id, Access::Configure, Resource::Exchange, name)?;
                    // As in RabbitMQ, only when the declaration creates it.
                    if !self.broker.exchange_exists(name) {
                        self.check_targets(id, Resource::Exchange, name, &arguments)?;
                    }
                }
                let options = ExchangeOptions {
                    passive: d.passive,
                    durable: d.durable,
                    auto_delete: d.auto_delete,
                    internal: d.internal,
                };
                self.state(id)?
                    .engine
                    .exchange_declare(name, kind, options, arguments)
                    .map_err(engine_err)?;
                (
                    d.nowait,
                    exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {}),
                )
            }
            exchange::AMQPMethod::Delete(d) => {
                let name = d.exchange.as_str();
                self.check(id, Access::Configure, Resource::Exchange, name)?;
                self.state(id)?
                    .engine
                    .exchange_delete(name, d.if_unused)
                    .map_err(engine_err)?;
                (
                    d.nowait,
                    exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {}),
                )
            }
            exchange::AMQPMethod::Bind(b) => {
                let (dest, src) = (b.destination.as_str(), b.source.as_str());
                self.check(id, Access::Write, Resource::Exchange, dest)?;
                self.check(id, Access::Read, Resource::Exchange, src)?;
                self.state(id)?
                    .engine
                    .exchange_bind(
                        dest,
                        src,
                        b.routing_key.as_str(),
                        table_from_wire(&b.arguments),
                    )
                    .map_err(engine_err)?;
                (b.nowait, exchange::AMQPMethod::BindOk(exchange::BindOk {}))
            }
            exchange::AMQPMethod::Unbind(b) => {
                let (dest, src) = (b.destination.as_str(), b.source.as_str());
                self.check(id, Access::Write, Resource::Exchange, dest)?;
                self.check(id, Access::Read, Resource::Exchange, src)?;
                self.state(id)?
                    .engine
                    .exchange_unbind(
                        dest,
                        src,
                        b.routing_key.as_str(),
                        &table_from_wire(&b.arguments),
                    )
                    .map_err(engine_err)?;
                (
                    b.nowait,
                    exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {}),
                )
            }
            _ => return Err(invalid(ids)),
        };
        if nowait {
            return Ok(());
        }
        self.reply(id, AMQPClass::Exchange(ok)).await
    }

    async fn queue_method(
        &mut self,
        id: u16,
        m: queue::AMQPMethod,
        ids: (u16, u16),
    ) -> Result<(), Fault> {
        let engine_err = |e| Fault::engine(id, e, ids);
        let (nowait, ok) = match m {
            queue::AMQPMethod::Declare(d) => {
                let name = d.queue.as_str();
                let server_named = name.is_empty();
                let arguments = table_from_wire(&d.arguments);
                if !d.passive && !server_named {
                    self.check(id, Access::Configure, Resource::Queue, name)?;
                    // As in RabbitMQ, only when the declaration creates it.
                    if self.broker.queue_counts(name).is_none() {
                        self.check_targets(id, Resource::Queue, name, &arguments)?;
                    }
                }
                let options = QueueOptions {
                    passive: d.passive,
                    durable: d.durable,
                    exclusive: d.exclusive,
                    auto_delete: d.auto_delete,
                };
                let checked_after = server_named.then(|| arguments.clone());
                let state = self.state(id)?;
                let declared = state
                    .engine
                    .queue_declare(name, options, arguments)
                    .map_err(engine_err)?;
                if let Some(arguments) = checked_after.filter(|_| !d.passive) {
                    // RabbitMQ checks the name it generated; the engine generates it here.
                    if let Err(fault) = self
                        .check(id, Access::Configure, Resource::Queue, &declared.name)
                        .and_then(|()| {
                            self.check_targets(id, Resource::Queue, &declared.name, &arguments)
                        })
                    {
                        let _ = self
                            .state(id)?
                            .engine
                            .queue_delete(&declared.name, false, false);
                        return Err(fault);
                    }
                }
                self.state(id)?.last_queue = Some(declared.name.clone());
                (
                    d.nowait,
                    queue::AMQPMethod::DeclareOk(queue::DeclareOk {
                        queue: short(&declared.name),
                        message_count: declared.message_count,
                        consumer_count: declared.consumer_count,
                    }),
                )
            }
            queue::AMQPMethod::Bind(b) => {
                let q = self.queue_name(id, b.queue.as_str())?;
                self.check(id, Access::Write, Resource::Queue, &q)?;
                self.check(id, Access::Read, Resource::Exchange, b.exchange.as_str())?;
                self.state(id)?
                    .engine
                    .queue_bind(
                        &q,
                        b.exchange.as_str(),
                        b.routing_key.as_str(),
                        table_from_wire(&b.arguments),
                    )
                    .map_err(engine_err)?;
                (b.nowait, queue::AMQPMethod::BindOk(queue::BindOk {}))
            }
            queue::AMQPMethod::Unbind(b) => {
                let q = self.queue_name(id, b.queue.as_str())?;
                self.check(id, Access::Write, Resource::Queue, &q)?;
                self.check(id, Access::Read, Resource::Exchange, b.exchange.as_str())?;
                self.state(id)?
                    .engine
                    .queue_unbind(
                        &q,
                        b.exchange.as_str(),
                        b.routing_key.as_str(),
                        &table_from_wire(&b.arguments),
                    )
                    .map_err(engine_err)?;
                (false, queue::AMQPMethod::UnbindOk(queue::UnbindOk {}))
            }
            queue::AMQPMethod::Purge(p) => {
                let q = self.queue_name(id, p.queue.as_str())?;
                self.check(id, Access::Read, Resource::Queue, &q)?;
                let message_count = self.state(id)?.engine.queue_purge(&q).map_err(engine_err)?;
                (
                    p.nowait,
                    queue::AMQPMethod::PurgeOk(queue::PurgeOk { message_count }),
                )
            }
            queue::AMQPMethod::Delete(d) => {
                let q = self.queue_name(id, d.queue.as_str())?;
                self.check(id, Access::Configure, Resource::Queue, &q)?;
                let message_count = self
                    .state(id)?
                    .engine
                    .queue_delete(&q, d.if_unused, d.if_empty)
                    .map_err(engine_err)?;
                (
                    d.nowait,
                    queue::AMQPMethod::DeleteOk(queue::DeleteOk { message_count }),
                )
            }
            _ => return Err(invalid(ids)),
        };
        if nowait {
            return Ok(());
        }
        self.reply(id, AMQPClass::Queue(ok)).await
    }

    async fn basic_method(
        &mut self,
        id: u16,
        m: basic::AMQPMethod,
        ids: (u16, u16),
    ) -> Result<(), Fault> {
        let engine_err = |e| Fault::engine(id, e, ids);
        match m {
            basic::AMQPMethod::Publish(p) => {
                if p.immediate {
                    return Err(Fault::Connection(
                        Close::new(reply::NOT_IMPLEMENTED, "immediate=true").on(ids),
                    ));
                }
                self.check(id, Access::Write, Resource::Exchange, p.exchange.as_str())?;
                self.state(id)?.assembly = Some(Assembly {
                    exchange: p.exchange.as_str().to_owned(),
                    routing_key: p.routing_key.as_str().to_owned(),
                    mandatory: p.mandatory,
                    header: None,
                    body: BytesMut::new(),
                });
                Ok(())
            }
            basic::AMQPMethod::Qos(q) => {
                self.state(id)?
                    .engine
                    .basic_qos(q.prefetch_count, q.global)
                    .map_err(engine_err)?;
                self.reply(
                    id,
                    AMQPClass::Basic(basic::AMQPMethod::QosOk(basic::QosOk {})),
                )
                .await
            }
            basic::AMQPMethod::Consume(c) => {
                let q = self.queue_name(id, c.queue.as_str())?;
                self.check(id, Access::Read, Resource::Queue, &q)?;
                let options = ConsumeOptions {
                    consumer_tag: (!c.consumer_tag.as_str().is_empty())
                        .then(|| c.consumer_tag.as_str().to_owned()),
                    no_ack: c.no_ack,
                    exclusive: c.exclusive,
                    arguments: table_from_wire(&c.arguments),
                };
                let frame_max = self.frame_max;
                let out = self.out.clone();
                let state = self.state(id)?;
                let consumer = state
                    .engine
                    .basic_consume(&q, options)
                    .map_err(engine_err)?;
                let tag = consumer.tag().to_owned();
                let flow = state.flow.subscribe();
                if !c.nowait {
                    // consume-ok goes out before the first delivery.
                    self.reply(
                        id,
                        AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                            consumer_tag: short(&tag),
                        })),
                    )
                    .await?;
                }
                let handle = tokio::spawn(pump(consumer, id, out, flow, frame_max));
                self.state(id)?.consumers.insert(tag, handle);
                Ok(())
            }
            basic::AMQPMethod::Cancel(c) => {
                let tag = c.consumer_tag.as_str().to_owned();
                let state = self.state(id)?;
                state.engine.basic_cancel(&tag).map_err(engine_err)?;
                let flowing = *state.flow.borrow();
                if let Some(handle) = state.consumers.remove(&tag) {
                    // The pump ends once the engine has cancelled the consumer; what it had
                    // taken goes out before cancel-ok.
                    if !flowing {
                        handle.abort();
                    }
                    let _ = handle.await;
                }
                if c.nowait {
                    return Ok(());
                }
                self.reply(
                    id,
                    AMQPClass::Basic(basic::AMQPMethod::CancelOk(basic::CancelOk {
                        consumer_tag: short(&tag),
                    })),
                )
                .await
            }
            basic::AMQPMethod::Get(g) => {
                let q = self.queue_name(id, g.queue.as_str())?;
                self.check(id, Access::Read, Resource::Queue, &q)?;
                let frame_max = self.frame_max;
                let got = self
                    .state(id)?
                    .engine
                    .basic_get(&q, g.no_ack)
                    .map_err(engine_err)?;
                let Some(got) = got else {
                    return self
                        .reply(
                            id,
                            AMQPClass::Basic(basic::AMQPMethod::GetEmpty(basic::GetEmpty {})),
                        )
                        .await;
                };
                let d = &got.delivery;
                let message = E::to_wire(&d.body);
                let mut e = Encoder::new();
                e.method(
                    id,
                    AMQPClass::Basic(basic::AMQPMethod::GetOk(basic::GetOk {
                        delivery_tag: d.delivery_tag,
                        redelivered: d.redelivered,
                        exchange: short(d.exchange()),
                        routing_key: short(d.routing_key()),
                        message_count: got.message_count,
                    })),
                );
                e.content(
                    id,
                    crate::convert::properties_to_wire(&message),
                    &message.payload,
                    frame_max,
                );
                self.send(e.take()).await
            }
            basic::AMQPMethod::Ack(a) => self
                .state(id)?
                .engine
                .basic_ack(a.delivery_tag, a.multiple)
                .map_err(engine_err),
            basic::AMQPMethod::Nack(n) => self
                .state(id)?
                .engine
                .basic_nack(n.delivery_tag, n.multiple, n.requeue)
                .map_err(engine_err),
            basic::AMQPMethod::Reject(r) => self
                .state(id)?
                .engine
                .basic_reject(r.delivery_tag, r.requeue)
                .map_err(engine_err),
            basic::AMQPMethod::Recover(r) => {
                self.recover(id, r.requeue, ids)?;
                self.reply(
                    id,
                    AMQPClass::Basic(basic::AMQPMethod::RecoverOk(basic::RecoverOk {})),
                )
                .await
            }
            basic::AMQPMethod::RecoverAsync(r) => self.recover(id, r.requeue, ids),
            _ => Err(invalid(ids)),
        }
    }

    /// `basic.recover`: every unacknowledged delivery of the channel goes back to its queue,
    /// marked redelivered (RabbitMQ refuses `requeue=false` with 540).
    fn recover(&mut self, id: u16, requeue: bool, ids: (u16, u16)) -> Result<(), Fault> {
        if !requeue {
            return Err(Fault::Connection(
                Close::new(reply::NOT_IMPLEMENTED, "requeue=false").on(ids),
            ));
        }
        self.state(id)?
            .engine
            .basic_nack(0, true, true)
            .map_err(|e| Fault::engine(id, e, ids))
    }
}

fn channel_close_ok() -> AMQPClass {
    AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {}))
}

fn invalid(ids: (u16, u16)) -> Fault {
    Fault::Connection(
        Close::new(
            reply::COMMAND_INVALID,
            format!(
                "method (class {}, method {}) is not one a client sends",
                ids.0, ids.1
            ),
        )
        .on(ids),
    )
}
