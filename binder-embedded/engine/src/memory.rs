//! What a message held by the engine costs in memory, as the memory high watermark counts it.
//!
//! The estimate adds up the heap blocks a queued message keeps alive, each rounded as glibc's
//! `malloc` rounds it (16-byte steps, 8 bytes of chunk header, 32 bytes at least), and the
//! slots it takes in its queue's ring buffers:
//!
//! * the record (the envelope's record; [`Published`](crate::Published) is 56 bytes): in
//!   its shared `Arc`, a block of 80; or, held by a queue that has a backlog (a record that
//!   reaches only that queue, see [`QueuedMessage`]), its 56-byte slot in the queue's ring of
//!   records: [`unheld`] (24) less, until it leaves the queue boxed again;
//! * the queue's entry for it ([`QueuedMessage`], 32 bytes); from delivery to settlement
//!   also the channel's record of the delivery and the delivery handed to the consumer
//!   (112 bytes more);
//! * its route (exchange and routing key, [`Route`](crate::Route)): the route's block (64)
//!   and the routing key's, when the message holds the route with at most one other holder
//!   (the publishing channel's cache); a route earlier messages still hold is counted by the
//!   first of them;
//! * the payload's block;
//! * the header table, when it has entries: its box (32), and a `BTreeMap` allocates a node
//!   of 11 slots (724 bytes) for its first entry, and about one more per five entries beyond
//!   eleven; each name and string value has a block of its own, nested arrays and tables are
//!   counted the same way;
//! * the properties' box when any property was set (240), and the property strings (a
//!   content type shared with other messages counts nothing);
//!   an [`Envelope`] reports the payload, headers and properties of its records
//!   ([`Envelope::message_heap`]), with [`block`], [`btree_nodes`] and [`shared_str`].
//!
//! Each message's figure is worked out once, when it enters a queue, and kept in its entry:
//! what is added to the count is what is taken off again (plus or minus [`unheld`] when a
//! held record is boxed, and the delivery's cost while it is unacknowledged).
//!
//! Measured on this engine (RSS growth per message over 200 000, `tests/memory_footprint.rs`,
//! debug build): a queued 20-byte message without headers costs about 120 bytes and is
//! counted as 120 (past the first 1 024, its queue holds the record); one of 200 bytes with
//! three headers and two id properties costs about 1 529 and is counted as 1 528; a 20-byte
//! delivery awaiting its ack costs about 265 and is counted as 256.
//! A message routed to several queues is counted once per queue that holds it: the record
//! is shared, but counting it once would undercount as soon as the first queue lets it go.

use std::collections::BTreeMap;
use std::mem::size_of;
use std::sync::Arc;

use crate::envelope::{Envelope, Native};
use crate::field::{FieldTable, FieldValue};
use crate::message::{Message, Properties};
#[cfg(test)]
use crate::message::{Published, Route};
use crate::storage::QueuedMessage;

/// The heap a block of `n` bytes takes under glibc `malloc`: the request plus an 8-byte
/// header, rounded up to 16, at least 32; nothing for an empty request (no allocation).
pub const fn block(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let chunk = (n + 8 + 15) & !15;
    if chunk < 32 { 32 } else { chunk }
}

/// Slots of a `BTreeMap` node (std's `CAPACITY`).
const BTREE_CAPACITY: usize = 11;

/// A `BTreeMap` leaf node whose entries take `slot` bytes each: parent pointer, index and
/// length, then the keys and values.
const fn btree_leaf(slot: usize) -> usize {
    8 + 2 + 2 + BTREE_CAPACITY * slot
}

/// The leaf of a field table.
#[cfg(test)]
const BTREE_LEAF: usize = btree_leaf(size_of::<String>() + size_of::<FieldValue>());

/// The nodes of a `BTreeMap` of `entries` entries of `slot` bytes each (a field table is
/// one; so is any front end's header map built on `BTreeMap`).
pub fn btree_nodes(entries: usize, slot: usize) -> usize {
    let leaf = btree_leaf(slot);
    // An internal node: a leaf plus its twelve child pointers.
    let internal = leaf + (BTREE_CAPACITY + 1) * size_of::<usize>();
    match entries {
        0 => 0,
        1..=BTREE_CAPACITY => block(leaf),
        // Leaves hold five to eleven entries once they split; five is the conservative count.
        _ => {
            let leaves = entries.div_ceil(5);
            leaves * block(leaf) + leaves.div_ceil(5) * block(internal)
        }
    }
}

/// A queue's entry for a message (in the queue's ring buffer). While a consumer holds the
/// message unacknowledged, the engine adds the difference to the channel's record of the
/// delivery and the delivery in the consumer's inbox (`state::DELIVERED`). The same for
/// every envelope: the entry holds the record by `Arc`.
pub(crate) const ENTRY: usize = size_of::<QueuedMessage<Native>>();

/// The shared record's block: the `Arc`'s two counts and the record.
const fn record<E: Envelope>() -> usize {
    block(2 * size_of::<usize>() + size_of::<E::Record>())
}

/// What a record costs in its own `Arc` beyond its slot in the ring of records a queue
/// holds itself (see [`QueuedMessage`]): a message whose queue holds its record is counted
/// this much less, and this much more again once the record leaves the queue boxed (24
/// bytes for a 56-byte record: a block of 80 against 56).
pub const fn unheld<E: Envelope>() -> usize {
    record::<E>() - size_of::<E::Record>()
}

/// A route's block: the `Arc`'s two counts and the two names (`Arc<str>` each).
pub(crate) const ROUTE: usize = block(2 * size_of::<usize>() + 2 * size_of::<Arc<str>>());

/// The route's blocks (its own and its routing key's), when the record holds it with at most
/// one other holder (the channel's cache): a route that earlier messages still hold is
/// theirs (see the module docs).
fn route<E: Envelope>(body: &E::Record) -> usize {
    if E::route_holders(body) <= 2 {
        ROUTE + block(2 * size_of::<usize>() + E::routing_key(body).len())
    } else {
        0
    }
}

/// The estimated heap one queue's copy of a message keeps alive (see the module docs).
pub(crate) fn footprint<E: Envelope>(body: &E::Record) -> usize {
    record::<E>() + ENTRY + route::<E>(body) + E::message_heap(body)
}

/// [`footprint`] as a queue entry keeps it: a `u32`, saturated below `u32::MAX` by the cost
/// of a delivery, so that adding it never overflows (a message's footprint beyond 4 GiB,
/// with the payload limited to [`MAX_PAYLOAD`](crate::MAX_PAYLOAD), takes gigabytes of
/// headers). The same figure is added to and taken off the count.
pub(crate) fn entry_footprint<E: Envelope>(body: &E::Record) -> u32 {
    let most = u32::MAX as usize - crate::state::DELIVERED;
    footprint::<E>(body).min(most) as u32
}

/// The heap blocks a message owns: payload, headers, the properties' box and its strings.
pub fn message_heap(m: &Message) -> usize {
    let boxed = if m.properties.is_allocated() {
        block(size_of::<Properties>())
    } else {
        0
    };
    let p = &m.properties;
    let strings = [
        &p.content_encoding,
        &p.correlation_id,
        &p.message_id,
        &p.reply_to,
        &p.expiration,
        &p.kind,
        &p.user_id,
        &p.app_id,
    ];
    block(m.payload.len())
        + boxed
        + headers(&m.headers)
        + shared_str(p.content_type.as_ref())
        + strings
            .iter()
            .map(|s| s.as_ref().map_or(0, |s| block(s.len())))
            .sum::<usize>()
}

/// A shared string (a content type) counts only when nothing else holds it: shared with a
/// binding or other messages, it is not this message's to count.
pub fn shared_str(s: Option<&Arc<str>>) -> usize {
    match s {
        Some(s) if Arc::strong_count(s) == 1 => block(2 * size_of::<usize>() + s.len()),
        _ => 0,
    }
}

/// A header table's box (none when it is empty), nodes and the blocks of its names and values.
fn headers(h: &FieldTable) -> usize {
    if h.is_empty() {
        return 0;
    }
    block(size_of::<BTreeMap<String, FieldValue>>())
        + btree_nodes(h.len(), size_of::<String>() + size_of::<FieldValue>())
        + h.iter()
            .map(|(name, value)| block(name.len()) + header_value(value))
            .sum::<usize>()
}

fn header_value(v: &FieldValue) -> usize {
    match v {
        FieldValue::String(s) => block(s.len()),
        FieldValue::Bytes(b) => block(b.len()),
        FieldValue::Array(items) => {
            block(items.len() * size_of::<FieldValue>())
                + items.iter().map(header_value).sum::<usize>()
        }
        FieldValue::Table(t) => headers(t),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: usize = record::<Native>();
    const PROPERTIES: usize = block(size_of::<Properties>());

    fn footprint(p: &Published) -> usize {
        super::footprint::<Native>(p)
    }

    fn published(message: Message) -> Published {
        Published::new("", "q", message)
    }

    #[test]
    fn the_documented_sizes_hold() {
        assert_eq!(
            (
                RECORD,
                ENTRY,
                ROUTE,
                PROPERTIES,
                block(size_of::<BTreeMap<String, FieldValue>>())
            ),
            (80, 32, 64, 240, 32)
        );
        assert_eq!(
            size_of::<Published>(),
            56,
            "the message and one route pointer"
        );
    }

    #[test]
    fn a_route_counts_for_a_message_that_holds_it_with_at_most_the_channels_cache() {
        let route = Route::new("", "orders.created");
        let own = |route: &Route| Published {
            route: route.clone(),
            message: Message::new("x"),
        };
        let first = own(&route);
        let with_route = footprint(&first);
        let key = block(16 + "orders.created".len());
        assert_eq!(
            with_route,
            RECORD + ENTRY + ROUTE + key + 32,
            "held by the channel's cache and this message: counted"
        );
        let second = own(&route);
        assert_eq!(
            footprint(&second),
            with_route - ROUTE - key,
            "an earlier message holds it too: not counted again"
        );
        drop((first, second, route));
        let alone = published(Message::new("x"));
        assert_eq!(footprint(&alone), RECORD + ENTRY + ROUTE + 32 + 32);
    }

    #[test]
    fn blocks_round_as_malloc_does() {
        assert_eq!(block(0), 0);
        assert_eq!(block(1), 32);
        assert_eq!(block(24), 32);
        assert_eq!(block(25), 48);
        assert_eq!(block(336), 352);
    }

    #[test]
    fn a_small_message_costs_its_record_entry_route_and_payload() {
        let small = footprint(&published(Message::new(vec![0u8; 20])));
        assert_eq!(small, RECORD + ENTRY + ROUTE + 32 + 32);
        let big = footprint(&published(Message::new(vec![0u8; 10_000])));
        assert_eq!(big - small, block(10_000) - block(20));
    }

    #[test]
    fn headers_and_properties_count() {
        let plain = footprint(&published(Message::new("x")));
        let one = footprint(&published(Message::new("x").with_header("k", "v")));
        assert_eq!(one - plain, block(24) + block(BTREE_LEAF) + 32 + 32);
        let mut many = Message::new("x");
        for i in 0..40 {
            many = many.with_header(format!("header-{i:02}"), i as i64);
        }
        assert!(footprint(&published(many)) - plain > 8 * block(BTREE_LEAF));
        let nested = Message::new("x").with_header(
            "x-death",
            FieldValue::Array(vec![FieldValue::Table(
                FieldTable::new().tap_insert("reason", "rejected"),
            )]),
        );
        assert!(footprint(&published(nested)) - plain > 2 * block(BTREE_LEAF));
        let mut with_id = Message::new("x");
        with_id.properties.message_id = Some("m".repeat(100));
        assert_eq!(
            footprint(&published(with_id)) - plain,
            PROPERTIES + block(100)
        );
    }

    #[test]
    fn a_shared_content_type_is_not_counted() {
        let shared: Arc<str> = Arc::from("application/json");
        let keep = shared.clone();
        let plain = footprint(&published(Message::new("x")));
        let with_shared = footprint(&published(Message::new("x").with_content_type(shared)));
        assert_eq!(with_shared, plain + PROPERTIES, "only the properties' box");
        drop(keep);
        let own = footprint(&published(
            Message::new("x").with_content_type("application/json"),
        ));
        assert_eq!(own - plain, PROPERTIES + block(16 + 16));
    }

    trait TapInsert {
        fn tap_insert(self, k: &str, v: &str) -> Self;
    }

    impl TapInsert for FieldTable {
        fn tap_insert(mut self, k: &str, v: &str) -> Self {
            self.insert(k, v);
            self
        }
    }
}
