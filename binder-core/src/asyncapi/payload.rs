//! A payload type as the AsyncAPI document knows it: its Rust name, and its JSON Schema when
//! the type implements `schemars::JsonSchema` and binder-core is built with its `schemars`
//! feature; otherwise the reason there is none.

use std::fmt;
use std::marker::PhantomData;

use serde_json::{Map, Value};

/// Why a payload type has no schema in the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoSchema {
    /// binder-core was built without its `schemars` feature.
    FeatureOff,
    /// The type does not implement `schemars::JsonSchema`.
    NotJsonSchema,
}

impl fmt::Display for NoSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NoSchema::FeatureOff => {
                "binder-core is built without its `schemars` feature, so no payload type has a schema"
            }
            NoSchema::NotJsonSchema => "the type does not implement `schemars::JsonSchema`",
        })
    }
}

/// Where the schemas of payload types are generated: one generator for the whole document,
/// so that a type used by several messages is defined once, under `components.schemas`.
pub struct SchemaSink {
    #[cfg(feature = "schemars")]
    generator: schemars::SchemaGenerator,
}

impl fmt::Debug for SchemaSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaSink").finish_non_exhaustive()
    }
}

impl SchemaSink {
    /// A generator of JSON Schema draft 7 (AsyncAPI's schema format is a superset of it)
    /// whose named types are referenced as `#/components/schemas/<name>`.
    pub(crate) fn new() -> Self {
        SchemaSink {
            #[cfg(feature = "schemars")]
            generator: schemars::generate::SchemaSettings::draft07()
                .with(|s| {
                    s.definitions_path = "/components/schemas".into();
                    s.meta_schema = None;
                })
                .into_generator(),
        }
    }

    /// The named types' schemas generated so far, for `components.schemas`.
    pub(crate) fn definitions(&mut self) -> Map<String, Value> {
        #[cfg(feature = "schemars")]
        {
            self.generator.take_definitions(true)
        }
        #[cfg(not(feature = "schemars"))]
        {
            Map::new()
        }
    }
}

type SchemaFn = fn(&mut SchemaSink) -> Value;

/// A payload type: its Rust name and, when it implements `schemars::JsonSchema` (with the
/// `schemars` feature), how to generate its schema.
///
/// `#[stream_listener]` records its listener's payload type (with the schema when the type
/// implements `JsonSchema`, detected at compile time); a program registers others with
/// [`AppBuilder::payload`](crate::runtime::AppBuilder::payload) or
/// [`DocumentBuilder::payload`](super::DocumentBuilder::payload).
#[derive(Clone, Copy)]
pub struct PayloadType {
    name: fn() -> &'static str,
    schema: Result<SchemaFn, NoSchema>,
}

impl fmt::Debug for PayloadType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PayloadType")
            .field("name", &self.name())
            .field("schema", &self.schema.map(|_| "JsonSchema"))
            .finish()
    }
}

impl PayloadType {
    /// `T` with its schema.
    #[cfg(feature = "schemars")]
    pub fn of<T: schemars::JsonSchema + 'static>() -> Self {
        PayloadType {
            name: std::any::type_name::<T>,
            schema: Ok(schema_of::<T>),
        }
    }

    /// `T`, whose schema is not known (`T` does not implement `JsonSchema`, or the feature
    /// is off).
    pub fn without_schema<T: 'static>() -> Self {
        PayloadType {
            name: std::any::type_name::<T>,
            schema: Err(if cfg!(feature = "schemars") {
                NoSchema::NotJsonSchema
            } else {
                NoSchema::FeatureOff
            }),
        }
    }

    /// The type's Rust name (`std::any::type_name`).
    pub fn name(&self) -> &'static str {
        (self.name)()
    }

    /// Whether the type has a schema.
    pub fn has_schema(&self) -> bool {
        self.schema.is_ok()
    }

    /// The type's schema (a `$ref` into `components.schemas` for a named type), or why there
    /// is none.
    pub(crate) fn schema(&self, sink: &mut SchemaSink) -> Result<Value, NoSchema> {
        self.schema.map(|make| make(sink))
    }
}

#[cfg(feature = "schemars")]
fn schema_of<T: schemars::JsonSchema>(sink: &mut SchemaSink) -> Value {
    sink.generator.subschema_for::<T>().to_value()
}

/// Tells at compile time whether `T` implements `JsonSchema`, without specialization: a
/// method call on `&Probe<T>` finds [`ViaJsonSchema`] (implemented for `Probe<T>` when
/// `T: JsonSchema`) before [`ViaName`] (implemented for `&Probe<T>`, one auto-reference
/// further). Used by [`__payload_type!`](crate::__payload_type) in the code
/// `#[stream_listener]` generates, where `T` is a concrete type.
#[doc(hidden)]
#[derive(Debug)]
pub struct Probe<T>(PhantomData<T>);

impl<T> Probe<T> {
    /// A probe of `T`.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Probe(PhantomData)
    }
}

/// The fallback of [`Probe`]: the type's name without a schema.
#[doc(hidden)]
pub trait ViaName {
    /// The payload type.
    fn payload_type(&self) -> PayloadType;
}

impl<T: 'static> ViaName for &Probe<T> {
    fn payload_type(&self) -> PayloadType {
        PayloadType::without_schema::<T>()
    }
}

/// The choice of [`Probe`] for a type that implements `JsonSchema` (none without the
/// `schemars` feature).
#[doc(hidden)]
pub trait ViaJsonSchema {
    /// The payload type.
    fn payload_type(&self) -> PayloadType;
}

#[cfg(feature = "schemars")]
impl<T: schemars::JsonSchema + 'static> ViaJsonSchema for Probe<T> {
    fn payload_type(&self) -> PayloadType {
        PayloadType::of::<T>()
    }
}

/// The [`PayloadType`] of a concrete type, with its schema when it implements
/// `schemars::JsonSchema` (and the `schemars` feature is on), for the code the macros
/// generate.
#[doc(hidden)]
#[macro_export]
macro_rules! __payload_type {
    ($t:ty) => {{
        #[allow(unused_imports)]
        use $crate::asyncapi::__probe::{ViaJsonSchema as _, ViaName as _};
        (&$crate::asyncapi::__probe::Probe::<$t>::new()).payload_type()
    }};
}

/// The [`PayloadType`] of a type that must implement `schemars::JsonSchema`
/// (`#[stream_listener(..., schema)]`): a compile error otherwise.
#[doc(hidden)]
#[cfg(feature = "schemars")]
#[macro_export]
macro_rules! __payload_type_with_schema {
    ($t:ty) => {
        $crate::asyncapi::PayloadType::of::<$t>()
    };
}

/// Without the `schemars` feature, `#[stream_listener(..., schema)]` cannot be honoured.
#[doc(hidden)]
#[cfg(not(feature = "schemars"))]
#[macro_export]
macro_rules! __payload_type_with_schema {
    ($t:ty) => {
        ::core::compile_error!(
            "#[stream_listener(..., schema)] needs binder-core's `schemars` feature: add `features = [\"schemars\"]` to the binder-core dependency"
        )
    };
}
