//! Payload codecs chosen by content type.
//!
//! Three codecs are built in: `application/json` (the default, also any `application/*+json`),
//! `text/plain` and `application/octet-stream`. Others are added with [`Codecs::register`]
//! by implementing [`Codec`] over `erased_serde`, so one codec serves every payload type.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde::de::value::{BytesDeserializer, StrDeserializer};

use crate::message::Message;

/// The content type used when neither the message nor the binding names one.
pub const DEFAULT_CONTENT_TYPE: &str = "application/json";

/// A payload that could not be decoded: what was expected, what arrived, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot decode the payload as `{expected}` from `{content_type}`: {reason} (payload, {len} bytes: {preview})"
)]
pub struct DecodeError {
    /// The Rust type the handler asked for.
    pub expected: String,
    /// The content type the decoder was chosen by.
    pub content_type: String,
    /// The decoder's reason.
    pub reason: String,
    /// Payload length in bytes.
    pub len: usize,
    /// The start of the payload, escaped for a log line.
    pub preview: String,
}

/// A value that could not be encoded for a content type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode a `{value_type}` as `{content_type}`: {reason}")]
pub struct EncodeError {
    /// The Rust type given.
    pub value_type: String,
    /// The content type asked for.
    pub content_type: String,
    /// The encoder's reason.
    pub reason: String,
}

/// Why a [`Codec`] could not encode or decode: any error type (serde's own, an I/O error), kept
/// as the source of the [`EncodeError`] or [`DecodeError`] the caller sees.
pub type CodecFailure = Box<dyn std::error::Error + Send + Sync>;

/// A content-type codec usable for any serde type.
///
/// ```
/// use binder_core::{Codec, CodecFailure, Codecs};
///
/// /// JSON in a custom media type, written compactly.
/// #[derive(Debug)]
/// struct Vendor;
///
/// impl Codec for Vendor {
///     fn content_type(&self) -> &str { "application/vnd.acme" }
///     fn encode(&self, value: &dyn erased_serde::Serialize) -> Result<Vec<u8>, CodecFailure> {
///         Ok(serde_json::to_vec(value)?)
///     }
///     fn decode(
///         &self,
///         bytes: &[u8],
///         sink: &mut dyn FnMut(&mut dyn erased_serde::Deserializer<'_>) -> Result<(), erased_serde::Error>,
///     ) -> Result<(), CodecFailure> {
///         let mut de = serde_json::Deserializer::from_slice(bytes);
///         Ok(sink(&mut <dyn erased_serde::Deserializer>::erase(&mut de))?)
///     }
/// }
///
/// let mut codecs = Codecs::default();
/// codecs.register(Vendor);
/// let bytes = codecs.encode("application/vnd.acme", &vec![1, 2]).unwrap();
/// let back: Vec<i32> = codecs.decode_bytes("application/vnd.acme", &bytes).unwrap();
/// assert_eq!(back, vec![1, 2]);
/// ```
pub trait Codec: fmt::Debug + Send + Sync + 'static {
    /// The media type this codec handles, without parameters (e.g. `application/cbor`).
    fn content_type(&self) -> &str;
    /// Encodes a value; the error's text is the reason shown to the user.
    fn encode(&self, value: &dyn erased_serde::Serialize) -> Result<Vec<u8>, CodecFailure>;
    /// Builds a deserializer over `bytes` and hands it to `sink`.
    fn decode(
        &self,
        bytes: &[u8],
        sink: &mut dyn FnMut(
            &mut dyn erased_serde::Deserializer<'_>,
        ) -> Result<(), erased_serde::Error>,
    ) -> Result<(), CodecFailure>;
}

#[derive(Debug, Clone)]
enum Entry {
    Json,
    Text,
    Octet,
    Custom(Arc<dyn Codec>),
}

/// The codec registry: content type to codec.
#[derive(Debug, Clone)]
pub struct Codecs {
    by_type: BTreeMap<String, Entry>,
    /// `application/json` is still the built-in JSON codec (no codec registered over it):
    /// the default content type then resolves without a lookup.
    builtin_json: bool,
}

impl Default for Codecs {
    fn default() -> Self {
        let by_type = [
            ("application/json", Entry::Json),
            ("text/plain", Entry::Text),
            ("application/octet-stream", Entry::Octet),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        Codecs {
            by_type,
            builtin_json: true,
        }
    }
}

/// The media type without parameters, lower-cased: `Application/JSON; charset=utf-8` →
/// `application/json`.
pub fn media_type(content_type: &str) -> String {
    media(content_type).into_owned()
}

/// [`media_type`] without an allocation when the content type is already lower-case (it is
/// looked up on every encode and decode).
fn media(content_type: &str) -> std::borrow::Cow<'_, str> {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if media.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(media.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(media)
    }
}

/// The largest scratch buffer a thread keeps between encodes (see [`encode_json`]).
const JSON_SCRATCH_KEPT: usize = 64 * 1024;

thread_local! {
    /// Where this thread writes JSON before copying it into a payload.
    static JSON_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// JSON encoding into a payload with no spare capacity: one allocation per message.
///
/// The JSON is written into a per-thread buffer, then copied into a payload of exactly its
/// size. Written straight into a payload, it would leave spare capacity, and `Bytes` then
/// allocates a second block to track it; an exact one is adopted as it is.
fn encode_json<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Bytes> {
    let direct = || serde_json::to_vec(value).map(|v| Bytes::from(v.into_boxed_slice()));
    JSON_SCRATCH
        .try_with(|scratch| {
            // A re-entrant call (a `Serialize` impl that encodes with us) gets its own buffer.
            let Ok(mut buf) = scratch.try_borrow_mut() else {
                return direct();
            };
            buf.clear();
            let written = serde_json::to_writer(&mut *buf, value);
            let payload = written.map(|()| Bytes::from(buf.to_vec()));
            if buf.capacity() > JSON_SCRATCH_KEPT {
                *buf = Vec::new();
            }
            payload
        })
        // The thread is exiting and its buffer is gone.
        .unwrap_or_else(|_| direct())
}

impl Codecs {
    /// Adds or replaces the codec for its content type.
    pub fn register(&mut self, codec: impl Codec) {
        let key = media_type(codec.content_type());
        if key == DEFAULT_CONTENT_TYPE {
            self.builtin_json = false;
        }
        self.by_type.insert(key, Entry::Custom(Arc::new(codec)));
    }

    /// The registered media types.
    pub fn content_types(&self) -> impl Iterator<Item = &str> {
        self.by_type.keys().map(String::as_str)
    }

    fn entry(&self, content_type: &str) -> Option<&Entry> {
        if self.builtin_json && content_type == DEFAULT_CONTENT_TYPE {
            return Some(&Entry::Json);
        }
        let media = media(content_type);
        if let Some(entry) = self.by_type.get(media.as_ref()) {
            return Some(entry);
        }
        // `application/vnd.foo+json` and friends are JSON unless a codec claims them.
        if media.ends_with("+json") {
            return Some(&Entry::Json);
        }
        if media.starts_with("text/") {
            return Some(&Entry::Text);
        }
        None
    }

    fn unknown(&self) -> String {
        let known: Vec<&str> = self.content_types().collect();
        format!(
            "no codec is registered for this content type (registered: {})",
            known.join(", ")
        )
    }

    /// Decodes a message's payload, choosing the codec by the message's content type or, if it
    /// has none, by `fallback` (the binding's `contentType`).
    ///
    /// A payload's `content-encoding` must say the bytes are as they are: none, empty,
    /// `identity`, or a UTF-8-compatible charset name (`UTF-8`, `utf8`, `US-ASCII`), which
    /// Spring AMQP's converters, pika and kombu write there. Anything else, such as `gzip`, is a
    /// [`DecodeError`] naming the encoding: no coding is undone, and payloads are read as
    /// UTF-8.
    pub fn decode<T: DeserializeOwned>(
        &self,
        message: &Message,
        fallback: &str,
    ) -> Result<T, DecodeError> {
        let content_type = message.content_type().unwrap_or(fallback);
        if let Some(encoding) = message.properties.content_encoding.as_deref() {
            let trimmed = encoding.trim();
            let as_is = ["", "identity", "utf-8", "utf8", "us-ascii", "ascii"]
                .iter()
                .any(|ok| trimmed.eq_ignore_ascii_case(ok));
            if !as_is {
                return Err(DecodeError {
                    expected: std::any::type_name::<T>().to_owned(),
                    content_type: content_type.to_owned(),
                    reason: format!(
                        "the payload has content-encoding `{encoding}`, which is not undone (payloads are decoded as they are, as UTF-8: only `identity` or a UTF-8 charset name is accepted)"
                    ),
                    len: message.payload.len(),
                    preview: preview(&message.payload),
                });
            }
        }
        self.decode_bytes(content_type, &message.payload)
    }

    /// Decodes bytes of the given content type.
    pub fn decode_bytes<T: DeserializeOwned>(
        &self,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<T, DecodeError> {
        let fail = |reason: String| DecodeError {
            expected: std::any::type_name::<T>().to_owned(),
            content_type: content_type.to_owned(),
            reason,
            len: bytes.len(),
            preview: preview(bytes),
        };
        let Some(entry) = self.entry(content_type) else {
            return Err(fail(self.unknown()));
        };
        match entry {
            Entry::Json => serde_json::from_slice(bytes).map_err(|e| fail(e.to_string())),
            Entry::Text => {
                let text = std::str::from_utf8(bytes)
                    .map_err(|e| fail(format!("the text is not valid UTF-8: {e}")))?;
                T::deserialize(StrDeserializer::<serde::de::value::Error>::new(text))
                    .map_err(|e| fail(format!("{e} (text/plain decodes into strings)")))
            }
            Entry::Octet => {
                T::deserialize(BytesDeserializer::<serde::de::value::Error>::new(bytes))
                    .map_err(|e| fail(format!("{e} (octet-stream decodes into `bytes::Bytes`)")))
            }
            Entry::Custom(codec) => {
                let mut out = None;
                codec
                    .decode(bytes, &mut |de| {
                        out = Some(erased_serde::deserialize::<T>(de)?);
                        Ok(())
                    })
                    .map_err(|e| fail(e.to_string()))?;
                out.ok_or_else(|| fail("the codec produced no value".to_owned()))
            }
        }
    }

    /// Encodes a value for the given content type.
    pub fn encode<T: Serialize + ?Sized>(
        &self,
        content_type: &str,
        value: &T,
    ) -> Result<Bytes, EncodeError> {
        let fail = |reason: String| EncodeError {
            value_type: std::any::type_name::<T>().to_owned(),
            content_type: content_type.to_owned(),
            reason,
        };
        let Some(entry) = self.entry(content_type) else {
            return Err(fail(self.unknown()));
        };
        match entry {
            Entry::Json => encode_json(value).map_err(|e| fail(e.to_string())),
            Entry::Text => match serde_json::to_value(value).map_err(|e| fail(e.to_string()))? {
                serde_json::Value::String(s) => Ok(Bytes::from(s)),
                v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => {
                    Ok(Bytes::from(v.to_string()))
                }
                other => Err(fail(format!(
                    "text/plain carries strings, numbers or booleans, not {}",
                    json_kind(&other)
                ))),
            },
            Entry::Octet => octet_bytes(value).map_err(fail),
            Entry::Custom(codec) => codec
                .encode(&value)
                .map(Bytes::from)
                .map_err(|e| fail(e.to_string())),
        }
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Octet streams take anything that serializes as bytes, a byte sequence or a string.
fn octet_bytes<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, String> {
    match serde_json::to_value(value).map_err(|e| e.to_string())? {
        serde_json::Value::String(s) => Ok(Bytes::from(s)),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_u64()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| format!("octet-stream needs bytes (0–255), found {item}"))
            })
            .collect::<Result<Vec<u8>, String>>()
            .map(Bytes::from),
        other => Err(format!(
            "octet-stream carries bytes or strings, not {}",
            json_kind(&other)
        )),
    }
}

/// The first bytes of a payload, printable, for error messages.
fn preview(bytes: &[u8]) -> String {
    const MAX: usize = 64;
    let shown = &bytes[..bytes.len().min(MAX)];
    let mut out = String::from("`");
    out.push_str(&String::from_utf8_lossy(shown).escape_debug().to_string());
    out.push('`');
    if bytes.len() > MAX {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Order {
        id: u32,
        sku: String,
    }

    fn order_7() -> Order {
        Order {
            id: 7,
            sku: "A-1".into(),
        }
    }

    /// Serializes as the JSON encoding of its inner value, as a string: encoding it encodes
    /// inside an encode, on the same thread.
    struct Nested(Order);

    impl Serialize for Nested {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let inner = Codecs::default()
                .encode("application/json", &self.0)
                .map_err(serde::ser::Error::custom)?;
            s.serialize_str(std::str::from_utf8(&inner).map_err(serde::ser::Error::custom)?)
        }
    }

    #[test]
    fn json_encoding_works_nested_and_after_a_large_value() {
        let codecs = Codecs::default();
        let order = order_7();
        let nested = codecs
            .encode("application/json", &Nested(order))
            .expect("a nested encode does not clash with the outer one");
        assert_eq!(&nested[..], br#""{\"id\":7,\"sku\":\"A-1\"}""#);

        let large = "x".repeat(JSON_SCRATCH_KEPT * 2);
        let encoded = codecs.encode("application/json", &large).unwrap();
        assert_eq!(encoded.len(), large.len() + 2);
        let small = codecs.encode("application/json", &1u8).unwrap();
        assert_eq!(&small[..], b"1");
    }

    /// Pretty-printed JSON, registered over the built-in `application/json`.
    #[derive(Debug)]
    struct PrettyJson;

    impl Codec for PrettyJson {
        fn content_type(&self) -> &str {
            "Application/JSON"
        }
        fn encode(&self, value: &dyn erased_serde::Serialize) -> Result<Vec<u8>, CodecFailure> {
            Ok(serde_json::to_vec_pretty(value)?)
        }
        fn decode(
            &self,
            bytes: &[u8],
            sink: &mut dyn FnMut(
                &mut dyn erased_serde::Deserializer<'_>,
            ) -> Result<(), erased_serde::Error>,
        ) -> Result<(), CodecFailure> {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            Ok(sink(&mut <dyn erased_serde::Deserializer<'_>>::erase(
                &mut de,
            ))?)
        }
    }

    #[test]
    fn a_codec_registered_for_json_replaces_the_built_in_one() {
        let mut codecs = Codecs::default();
        let order = order_7();
        let compact = codecs.encode(DEFAULT_CONTENT_TYPE, &order).unwrap();
        assert!(!compact.contains(&b'\n'));
        codecs.register(PrettyJson);
        let pretty = codecs.encode(DEFAULT_CONTENT_TYPE, &order).unwrap();
        assert!(pretty.contains(&b'\n'), "the registered codec encodes");
    }

    #[test]
    fn json_is_the_default_and_round_trips() {
        let codecs = Codecs::default();
        let order = order_7();
        let bytes = codecs.encode(DEFAULT_CONTENT_TYPE, &order).unwrap();
        let msg = Message::new(bytes);
        let back: Order = codecs.decode(&msg, DEFAULT_CONTENT_TYPE).unwrap();
        assert_eq!(back, order);
    }

    #[test]
    fn json_decode_error_says_what_was_expected_and_what_arrived() {
        let codecs = Codecs::default();
        let msg = Message::new(&b"{\"sku\":\"A-1\"}"[..]).with_content_type("application/json");
        let err = codecs.decode::<Order>(&msg, "text/plain").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("Order"), "{text}");
        assert!(text.contains("application/json"), "{text}");
        assert!(text.contains("missing field `id`"), "{text}");
        assert!(text.contains("{\\\"sku\\\":\\\"A-1\\\"}"), "{text}");
    }

    #[test]
    fn only_payloads_as_they_are_decode() {
        let codecs = Codecs::default();
        let with = |encoding: &str| {
            let mut m = Message::new(&b"[1]"[..]).with_content_type("application/json");
            m.properties.content_encoding = Some(encoding.to_owned());
            m
        };
        // Spring AMQP's converters and pika write the charset there.
        for ok in ["", "identity", " Identity ", "UTF-8", "utf8", "US-ASCII"] {
            let v: Vec<u8> = codecs.decode(&with(ok), DEFAULT_CONTENT_TYPE).unwrap();
            assert_eq!(v, vec![1], "content-encoding `{ok}`");
        }
        for refused in ["gzip", "deflate", "br", "gzip, identity", "ISO-8859-1"] {
            let err = codecs
                .decode::<Vec<u8>>(&with(refused), DEFAULT_CONTENT_TYPE)
                .unwrap_err();
            assert!(
                err.reason
                    .contains(&format!("content-encoding `{refused}`")),
                "{err}"
            );
            assert!(err.to_string().contains("Vec<u8>"), "{err}");
        }
    }

    #[test]
    fn parameters_and_case_do_not_matter_and_plus_json_is_json() {
        let codecs = Codecs::default();
        let v: Vec<u8> = codecs
            .decode_bytes("Application/JSON; charset=utf-8", b"[1,2]")
            .unwrap();
        assert_eq!(v, vec![1, 2]);
        let v: Vec<u8> = codecs
            .decode_bytes("application/vnd.orders.v1+json", b"[3]")
            .unwrap();
        assert_eq!(v, vec![3]);
    }

    #[test]
    fn text_plain_round_trips_strings_and_renders_numbers() {
        let codecs = Codecs::default();
        let bytes = codecs.encode("text/plain", "héllo").unwrap();
        assert_eq!(&bytes[..], "héllo".as_bytes());
        let back: String = codecs.decode_bytes("text/plain", &bytes).unwrap();
        assert_eq!(back, "héllo");
        assert_eq!(&codecs.encode("text/plain", &42).unwrap()[..], b"42");
        let err = codecs.encode("text/plain", &vec![1]).unwrap_err();
        assert!(err.to_string().contains("not an array"), "{err}");
        let err = codecs
            .decode_bytes::<String>("text/plain", &[0xff, 0xfe])
            .unwrap_err();
        assert!(err.reason.contains("UTF-8"), "{err}");
    }

    #[test]
    fn octet_stream_carries_bytes() {
        let codecs = Codecs::default();
        let raw = Bytes::from_static(&[0, 1, 255]);
        let enc = codecs.encode("application/octet-stream", &raw).unwrap();
        assert_eq!(enc, raw);
        let dec: Bytes = codecs
            .decode_bytes("application/octet-stream", &enc)
            .unwrap();
        assert_eq!(dec, raw);
        let err = codecs
            .decode_bytes::<u32>("application/octet-stream", &enc)
            .unwrap_err();
        assert!(err.reason.contains("bytes::Bytes"), "{err}");
    }

    #[test]
    fn unknown_content_type_lists_the_registered_ones() {
        let codecs = Codecs::default();
        let err = codecs
            .decode_bytes::<String>("application/x-protobuf", b"")
            .unwrap_err();
        assert!(
            err.reason
                .contains("application/json, application/octet-stream, text/plain")
        );
        assert!(codecs.encode("application/x-protobuf", &1).is_err());
    }

    #[test]
    fn long_payloads_are_previewed_briefly() {
        let codecs = Codecs::default();
        let long = vec![b'x'; 500];
        let err = codecs
            .decode_bytes::<u32>("application/json", &long)
            .unwrap_err();
        assert_eq!(err.len, 500);
        assert!(err.preview.ends_with('…'));
        assert!(err.preview.len() < 80);
    }
}
