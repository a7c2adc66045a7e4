//! What consecutive deliveries share: a consumer's deliveries mostly come from one exchange
//! with one routing key and carry the same properties (their binding's content type and
//! delivery mode), so each reuses the [`Route`] and the [`SharedProperties`] of the one
//! before instead of allocating its own.

use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::ShortString;
use binder_core::binder::Route;
use binder_core::message::{DeliveryMode, Properties, SharedProperties};

use crate::convert;

/// The route and the properties of the last delivery a subscription converted.
///
/// ```
/// use amq_protocol::protocol::BasicProperties;
/// use amq_protocol::types::ShortString;
/// use binder_amqp::Recent;
///
/// let mut recent = Recent::default();
/// let first = recent.route("orders", "created");
/// let second = recent.route("orders", "created");
/// assert_eq!(first.holders(), 3); // one allocation, shared by both and the cache
/// assert_eq!(&**recent.route("orders", "paid").routing_key(), "paid");
///
/// let json = BasicProperties::default().with_content_type(ShortString::from("application/json"));
/// let a = recent.properties(&json);
/// let b = recent.properties(&json);
/// assert!(a.ptr_eq(&b)); // converted and allocated once
/// assert!(!recent.properties(&json.clone().with_priority(1)).ptr_eq(&a));
/// # drop(second);
/// ```
#[derive(Debug, Default)]
pub struct Recent {
    route: Option<Route>,
    /// The properties the last delivery converted to (its headers apart: a message keeps its
    /// headers apart from its properties).
    properties: Option<SharedProperties>,
}

impl Recent {
    /// The route of `exchange` and `routing_key`: the last one when it is the same pair, else
    /// a new one, kept for the next call.
    pub fn route(&mut self, exchange: &str, routing_key: &str) -> Route {
        match &self.route {
            Some(last) if last.is(exchange, routing_key) => last.clone(),
            _ => self.route.insert(Route::new(exchange, routing_key)).clone(),
        }
    }

    /// The message properties of `props` (every AMQP property but the headers): the last
    /// ones when `props` converts to the same, else newly converted, kept for the next call.
    /// Comparing allocates nothing, so properties that change with every delivery (a message
    /// id, a timestamp) cost a comparison more than converting them each time.
    pub fn properties(&mut self, props: &BasicProperties) -> SharedProperties {
        match &self.properties {
            Some(last) if converts_to(props, last) => last.clone(),
            _ => self
                .properties
                .insert(convert::properties_of(props))
                .clone(),
        }
    }
}

/// Whether `props` converts to `p` (see [`convert::properties_of`]), without converting.
fn converts_to(props: &BasicProperties, p: &Properties) -> bool {
    fn same(wire: &Option<ShortString>, ours: Option<&str>) -> bool {
        wire.as_ref().map(ShortString::as_str) == ours
    }
    same(props.content_type(), p.content_type.as_deref())
        && same(props.content_encoding(), p.content_encoding.as_deref())
        && same(props.correlation_id(), p.correlation_id.as_deref())
        && same(props.message_id(), p.message_id.as_deref())
        && same(props.reply_to(), p.reply_to.as_deref())
        && same(props.expiration(), p.expiration.as_deref())
        && same(props.kind(), p.kind.as_deref())
        && same(props.user_id(), p.user_id.as_deref())
        && same(props.app_id(), p.app_id.as_deref())
        && *props.timestamp() == p.timestamp
        && *props.priority() == p.priority
        && props.delivery_mode().map(DeliveryMode::from_u8) == p.delivery_mode
}
