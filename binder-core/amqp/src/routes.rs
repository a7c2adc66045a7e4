//! The route of consecutive deliveries, shared: a consumer's deliveries mostly come from one
//! exchange with one routing key, so each reuses the [`Route`] of the one before instead of
//! allocating a route and two names of its own.

use binder_core::binder::Route;

/// The route of the last delivery a subscription converted.
///
/// ```
/// use binder_amqp::RouteCache;
///
/// let mut routes = RouteCache::default();
/// let first = routes.route("orders", "created");
/// let second = routes.route("orders", "created");
/// assert_eq!(first.holders(), 3); // one allocation, shared by both and the cache
/// assert_eq!(&**routes.route("orders", "paid").routing_key(), "paid");
/// # drop(second);
/// ```
#[derive(Debug, Default)]
pub struct RouteCache(Option<Route>);

impl RouteCache {
    /// The route of `exchange` and `routing_key`: the last one when it is the same pair, else
    /// a new one, kept for the next call.
    pub fn route(&mut self, exchange: &str, routing_key: &str) -> Route {
        match &self.0 {
            Some(last) if last.is(exchange, routing_key) => last.clone(),
            _ => self.0.insert(Route::new(exchange, routing_key)).clone(),
        }
    }
}
