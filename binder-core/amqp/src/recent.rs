//! What consecutive deliveries share: a consumer's deliveries mostly come from one exchange
//! with one routing key and carry the same properties (their binding's content type and
//! delivery mode), so each reuses the [`Route`] and the [`SharedProperties`] of the one
//! before instead of allocating its own.

use amq_protocol::protocol::BasicProperties;
use binder_core::binder::Route;
use binder_core::message::SharedProperties;

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
    /// The last properties converted (their headers left out: a message keeps its headers
    /// apart from its properties), and what they converted to.
    properties: Option<(BasicProperties, SharedProperties)>,
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
    /// ones when every such property is the same, else newly converted, kept for the next
    /// call.
    pub fn properties(&mut self, props: &BasicProperties) -> SharedProperties {
        match &self.properties {
            Some((last, shared)) if same_apart_from_headers(last, props) => shared.clone(),
            _ => {
                let shared = convert::properties_of(props);
                let key = props.clone().with_headers(Default::default());
                self.properties.insert((key, shared)).1.clone()
            }
        }
    }
}

/// Whether two sets of AMQP properties agree on every property a message keeps but its
/// headers (`cluster-id`, deprecated, is not kept).
fn same_apart_from_headers(a: &BasicProperties, b: &BasicProperties) -> bool {
    a.content_type() == b.content_type()
        && a.content_encoding() == b.content_encoding()
        && a.delivery_mode() == b.delivery_mode()
        && a.priority() == b.priority()
        && a.correlation_id() == b.correlation_id()
        && a.reply_to() == b.reply_to()
        && a.expiration() == b.expiration()
        && a.message_id() == b.message_id()
        && a.timestamp() == b.timestamp()
        && a.kind() == b.kind()
        && a.user_id() == b.user_id()
        && a.app_id() == b.app_id()
}
