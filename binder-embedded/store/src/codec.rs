//! The binary encoding of what the store keeps: messages (`Published`), field tables and
//! declarations. Decoding never panics: damage that passed the CRC is a typed error.

use std::sync::Arc;

use bytes::Bytes;
use stream_engine::{
    BindingDef, Decimal, DestinationKind, ExchangeDef, ExchangeKind, ExchangeOptions, FieldTable,
    FieldValue, Message, PolicyDef, PolicyTarget, Properties, Published, QueueDef, QueueOptions,
    Route,
};

/// A payload could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("malformed record: {0}")]
pub(crate) struct Malformed(pub &'static str);

/// Decoding results.
pub(crate) type Decoded<T> = Result<T, Malformed>;

/// Appends encoded values to a buffer.
#[derive(Debug, Default)]
pub(crate) struct Out(pub Vec<u8>);

impl Out {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(v);
    }
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    fn opt_str(&mut self, v: Option<&str>) {
        match v {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
}

/// Shares one `Arc<str>` among the equal names a recovery decodes (queue names, exchanges,
/// routing keys): a million messages of one queue hold one copy of its name.
#[derive(Debug, Default)]
pub(crate) struct Interner(rustc_hash::FxHashSet<Arc<str>>);

impl Interner {
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(shared) = self.0.get(s) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(s);
        self.0.insert(shared.clone());
        shared
    }
}

/// Reads encoded values from a payload.
#[derive(Debug)]
pub(crate) struct In<'a>(pub &'a [u8]);

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> Decoded<&'a [u8]> {
        if self.0.len() < n {
            return Err(Malformed("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub fn u8(&mut self) -> Decoded<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Decoded<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Decoded<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    pub fn bytes(&mut self) -> Decoded<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> Decoded<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Malformed("string is not UTF-8"))
    }
    pub fn string(&mut self) -> Decoded<String> {
        self.str().map(str::to_owned)
    }
    pub fn shared(&mut self, names: &mut Interner) -> Decoded<Arc<str>> {
        Ok(names.get(self.str()?))
    }
    fn opt_string(&mut self) -> Decoded<Option<String>> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.string().map(Some),
            _ => Err(Malformed("bad option tag")),
        }
    }
    fn flag(&mut self) -> Decoded<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed("bad flag")),
        }
    }
}

/// How deep tables and arrays may nest in a record.
const MAX_DEPTH: u32 = 64;

fn put_value(out: &mut Out, v: &FieldValue) {
    match v {
        FieldValue::Void => out.u8(0),
        FieldValue::Bool(b) => {
            out.u8(1);
            out.u8(u8::from(*b));
        }
        FieldValue::I8(x) => {
            out.u8(2);
            out.0.extend_from_slice(&x.to_le_bytes());
        }
        FieldValue::U8(x) => {
            out.u8(3);
            out.u8(*x);
        }
        FieldValue::I16(x) => {
            out.u8(4);
            out.0.extend_from_slice(&x.to_le_bytes());
        }
        FieldValue::U16(x) => {
            out.u8(5);
            out.0.extend_from_slice(&x.to_le_bytes());
        }
        FieldValue::I32(x) => {
            out.u8(6);
            out.0.extend_from_slice(&x.to_le_bytes());
        }
        FieldValue::U32(x) => {
            out.u8(7);
            out.u32(*x);
        }
        FieldValue::I64(x) => {
            out.u8(8);
            out.0.extend_from_slice(&x.to_le_bytes());
        }
        FieldValue::F32(x) => {
            out.u8(9);
            out.u32(x.to_bits());
        }
        FieldValue::F64(x) => {
            out.u8(10);
            out.u64(x.to_bits());
        }
        FieldValue::Decimal(d) => {
            out.u8(11);
            out.u8(d.scale);
            out.0.extend_from_slice(&d.value.to_le_bytes());
        }
        FieldValue::String(s) => {
            out.u8(12);
            out.str(s);
        }
        FieldValue::Bytes(b) => {
            out.u8(13);
            out.bytes(b);
        }
        FieldValue::Timestamp(t) => {
            out.u8(14);
            out.u64(*t);
        }
        FieldValue::Array(items) => {
            out.u8(15);
            out.u32(u32::try_from(items.len()).unwrap_or(u32::MAX));
            for item in items {
                put_value(out, item);
            }
        }
        FieldValue::Table(t) => {
            out.u8(16);
            put_table(out, t);
        }
    }
}

fn get_value(inp: &mut In<'_>, depth: u32) -> Decoded<FieldValue> {
    if depth > MAX_DEPTH {
        return Err(Malformed("tables nest too deep"));
    }
    let fixed = |inp: &mut In<'_>, n: usize| -> Decoded<Vec<u8>> { Ok(inp.take(n)?.to_vec()) };
    Ok(match inp.u8()? {
        0 => FieldValue::Void,
        1 => FieldValue::Bool(inp.flag()?),
        2 => FieldValue::I8(i8::from_le_bytes([inp.u8()?])),
        3 => FieldValue::U8(inp.u8()?),
        4 => {
            let b = fixed(inp, 2)?;
            FieldValue::I16(i16::from_le_bytes([b[0], b[1]]))
        }
        5 => {
            let b = fixed(inp, 2)?;
            FieldValue::U16(u16::from_le_bytes([b[0], b[1]]))
        }
        6 => FieldValue::I32(inp.u32()? as i32),
        7 => FieldValue::U32(inp.u32()?),
        8 => FieldValue::I64(inp.u64()? as i64),
        9 => FieldValue::F32(f32::from_bits(inp.u32()?)),
        10 => FieldValue::F64(f64::from_bits(inp.u64()?)),
        11 => {
            let scale = inp.u8()?;
            FieldValue::Decimal(Decimal {
                scale,
                value: inp.u32()? as i32,
            })
        }
        12 => FieldValue::String(inp.string()?),
        13 => FieldValue::Bytes(Bytes::copy_from_slice(inp.bytes()?)),
        14 => FieldValue::Timestamp(inp.u64()?),
        15 => {
            let n = inp.u32()? as usize;
            let mut items = Vec::with_capacity(n.min(inp.0.len()));
            for _ in 0..n {
                items.push(get_value(inp, depth + 1)?);
            }
            FieldValue::Array(items)
        }
        16 => FieldValue::Table(get_table(inp, depth + 1)?),
        _ => return Err(Malformed("unknown field type")),
    })
}

fn put_table(out: &mut Out, t: &FieldTable) {
    out.u32(u32::try_from(t.len()).unwrap_or(u32::MAX));
    for (k, v) in t.iter() {
        out.str(k);
        put_value(out, v);
    }
}

fn get_table(inp: &mut In<'_>, depth: u32) -> Decoded<FieldTable> {
    let n = inp.u32()?;
    let mut t = FieldTable::new();
    for _ in 0..n {
        let k = inp.string()?;
        t.insert(k, get_value(inp, depth)?);
    }
    Ok(t)
}

/// Bytes a published message's record takes beyond its exchange, routing key and body when
/// its properties are short and it has few headers: enough that the usual record is encoded
/// without growing its buffer.
const RECORD_SLACK: usize = 256;

/// A buffer sized for `p`'s record, so that encoding it does not reallocate (under the
/// broker's lock) in the usual case.
pub(crate) fn out_for(p: &Published) -> Out {
    Out(Vec::with_capacity(
        p.exchange().len() + p.routing_key().len() + p.message.payload.len() + RECORD_SLACK,
    ))
}

/// Encodes a published message.
pub(crate) fn put_published(out: &mut Out, p: &Published) {
    out.str(p.exchange());
    out.str(p.routing_key());
    let props = &p.message.properties;
    out.opt_str(props.content_type.as_deref());
    out.opt_str(props.content_encoding.as_deref());
    out.opt_str(props.correlation_id.as_deref());
    out.opt_str(props.message_id.as_deref());
    out.opt_str(props.reply_to.as_deref());
    out.opt_str(props.expiration.as_deref());
    out.opt_str(props.kind.as_deref());
    out.opt_str(props.user_id.as_deref());
    out.opt_str(props.app_id.as_deref());
    match props.timestamp {
        None => out.u8(0),
        Some(t) => {
            out.u8(1);
            out.u64(t);
        }
    }
    for small in [props.delivery_mode, props.priority] {
        match small {
            None => out.u8(0),
            Some(v) => {
                out.u8(1);
                out.u8(v);
            }
        }
    }
    put_table(out, &p.message.headers);
    out.bytes(&p.message.payload);
}

/// Decodes a published message.
/// A message as a segment record holds it: persistent, since the store is only handed
/// persistent messages. A record saying otherwise is damaged; read as it is, its message would
/// be lost at the first copy made of it (a dead letter), which nothing would store.
pub(crate) fn get_stored(inp: &mut In<'_>, names: &mut Interner) -> Decoded<Published> {
    let published = get_published(inp, names)?;
    if !published.message.properties.is_persistent() {
        return Err(Malformed("a stored message that is not persistent"));
    }
    Ok(published)
}

pub(crate) fn get_published(inp: &mut In<'_>, names: &mut Interner) -> Decoded<Published> {
    let exchange = inp.shared(names)?;
    let routing_key = inp.shared(names)?;
    let content_type = inp.opt_string()?.map(Arc::from);
    let content_encoding = inp.opt_string()?;
    let correlation_id = inp.opt_string()?;
    let message_id = inp.opt_string()?;
    let reply_to = inp.opt_string()?;
    let expiration = inp.opt_string()?;
    let kind = inp.opt_string()?;
    let user_id = inp.opt_string()?;
    let app_id = inp.opt_string()?;
    let timestamp = if inp.flag()? { Some(inp.u64()?) } else { None };
    let delivery_mode = if inp.flag()? { Some(inp.u8()?) } else { None };
    let priority = if inp.flag()? { Some(inp.u8()?) } else { None };
    let headers = get_table(inp, 0)?;
    let payload = Bytes::copy_from_slice(inp.bytes()?);
    Ok(Published {
        route: Route::new(exchange, routing_key),
        message: Message {
            payload,
            headers,
            properties: Properties {
                content_type,
                content_encoding,
                correlation_id,
                message_id,
                reply_to,
                expiration,
                timestamp,
                kind,
                user_id,
                app_id,
                delivery_mode,
                priority,
            }
            .into(),
        },
    })
}

pub(crate) fn put_exchange(out: &mut Out, x: &ExchangeDef) {
    out.str(&x.name);
    out.u8(match x.kind {
        ExchangeKind::Direct => 0,
        ExchangeKind::Fanout => 1,
        ExchangeKind::Topic => 2,
        ExchangeKind::Headers => 3,
    });
    let o = x.options;
    out.u8(u8::from(o.passive)
        | u8::from(o.durable) << 1
        | u8::from(o.auto_delete) << 2
        | u8::from(o.internal) << 3);
    put_table(out, &x.arguments);
}

pub(crate) fn get_exchange(inp: &mut In<'_>) -> Decoded<ExchangeDef> {
    let name = inp.string()?;
    let kind = match inp.u8()? {
        0 => ExchangeKind::Direct,
        1 => ExchangeKind::Fanout,
        2 => ExchangeKind::Topic,
        3 => ExchangeKind::Headers,
        _ => return Err(Malformed("unknown exchange type")),
    };
    let f = inp.u8()?;
    let options = ExchangeOptions {
        passive: f & 1 != 0,
        durable: f & 2 != 0,
        auto_delete: f & 4 != 0,
        internal: f & 8 != 0,
    };
    Ok(ExchangeDef {
        name,
        kind,
        options,
        arguments: get_table(inp, 0)?,
    })
}

pub(crate) fn put_queue(out: &mut Out, q: &QueueDef) {
    out.str(&q.name);
    let o = q.options;
    out.u8(u8::from(o.passive)
        | u8::from(o.durable) << 1
        | u8::from(o.exclusive) << 2
        | u8::from(o.auto_delete) << 3);
    put_table(out, &q.arguments);
}

pub(crate) fn get_queue(inp: &mut In<'_>) -> Decoded<QueueDef> {
    let name = inp.string()?;
    // Declared without a name, the broker would name it afresh at every start.
    if name.is_empty() {
        return Err(Malformed("a queue without a name"));
    }
    let f = inp.u8()?;
    let options = QueueOptions {
        passive: f & 1 != 0,
        durable: f & 2 != 0,
        exclusive: f & 4 != 0,
        auto_delete: f & 8 != 0,
    };
    Ok(QueueDef {
        name,
        options,
        arguments: get_table(inp, 0)?,
    })
}

pub(crate) fn put_binding(out: &mut Out, b: &BindingDef) {
    out.str(&b.source);
    out.str(&b.destination);
    out.u8(match b.destination_kind {
        DestinationKind::Queue => 0,
        DestinationKind::Exchange => 1,
    });
    out.str(&b.routing_key);
    put_table(out, &b.arguments);
}

pub(crate) fn get_binding(inp: &mut In<'_>) -> Decoded<BindingDef> {
    let source = inp.string()?;
    let destination = inp.string()?;
    let destination_kind = match inp.u8()? {
        0 => DestinationKind::Queue,
        1 => DestinationKind::Exchange,
        _ => return Err(Malformed("unknown destination kind")),
    };
    Ok(BindingDef {
        source,
        destination,
        destination_kind,
        routing_key: inp.string()?,
        arguments: get_table(inp, 0)?,
    })
}

pub(crate) fn put_policy(out: &mut Out, p: &PolicyDef) {
    out.str(&p.name);
    out.str(&p.pattern);
    out.u8(match p.apply_to {
        PolicyTarget::All => 0,
        PolicyTarget::Queues => 1,
        PolicyTarget::Exchanges => 2,
    });
    out.u64(p.priority as u64);
    put_table(out, &p.definition);
}

pub(crate) fn get_policy(inp: &mut In<'_>) -> Decoded<PolicyDef> {
    let name = inp.string()?;
    let pattern = inp.string()?;
    let apply_to = match inp.u8()? {
        0 => PolicyTarget::All,
        1 => PolicyTarget::Queues,
        2 => PolicyTarget::Exchanges,
        _ => return Err(Malformed("unknown policy target")),
    };
    Ok(PolicyDef {
        name,
        pattern,
        apply_to,
        priority: inp.u64()? as i64,
        definition: get_table(inp, 0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips() {
        let mut headers = FieldTable::new();
        headers.insert("n", FieldValue::I64(-3));
        headers.insert(
            "nested",
            FieldValue::Array(vec![FieldValue::Decimal(Decimal {
                scale: 2,
                value: -5,
            })]),
        );
        let p = Published {
            route: Route::new("x", "k"),
            message: Message {
                payload: Bytes::from_static(b"body"),
                headers,
                properties: Properties {
                    content_type: Some(Arc::from("text/plain")),
                    delivery_mode: Some(2),
                    timestamp: Some(7),
                    ..Default::default()
                }
                .into(),
            },
        };
        let mut out = out_for(&p);
        let sized = out.0.capacity();
        put_published(&mut out, &p);
        assert_eq!(
            out.0.capacity(),
            sized,
            "the record fits the buffer sized for it"
        );
        let names = &mut Interner::default();
        let back = get_published(&mut In(&out.0), names).unwrap();
        assert_eq!(back, p);
        for cut in 0..out.0.len() {
            assert!(get_published(&mut In(&out.0[..cut]), names).is_err());
        }
    }

    #[test]
    fn a_queue_without_a_name_is_malformed() {
        for (name, ok) in [("q", true), ("", false)] {
            let mut out = Out::default();
            put_queue(
                &mut out,
                &QueueDef {
                    name: name.to_owned(),
                    options: QueueOptions {
                        durable: true,
                        ..Default::default()
                    },
                    arguments: FieldTable::new(),
                },
            );
            assert_eq!(get_queue(&mut In(&out.0)).is_ok(), ok, "{name:?}");
        }
    }
}
