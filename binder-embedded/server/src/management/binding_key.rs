//! RabbitMQ's `properties_key`, the last path segment that names one binding between a
//! source and a destination: the routing key quoted as a form value (`~` quoted too), then,
//! when the binding has arguments, `~` and a hash of them; `~` alone for an empty routing
//! key without arguments. Quoting keeps two bindings from sharing a key (a routing key `~`
//! and an empty one, a `~` inside a key and the separator).

use stream_engine::FieldTable;

/// The `properties_key` of a binding with this routing key and these arguments.
pub(crate) fn properties_key(routing_key: &str, arguments: &FieldTable) -> String {
    if routing_key.is_empty() && arguments.is_empty() {
        return "~".to_owned();
    }
    let mut key = quote(routing_key);
    if !arguments.is_empty() {
        key.push('~');
        key.push_str(&arguments_hash(arguments));
    }
    key
}

/// Whether `key` (as it came in a path, percent-decoded once) names the binding with this
/// routing key and these arguments. The routing key part is unquoted first, so that both
/// the listed key (`order.%23`) and the plain routing key (`order.#`, as `rabbitmqadmin
/// delete binding properties_key=order.#` sends it) name the binding, as in RabbitMQ; a
/// plain key holding `+`, `%` or `~` is read as the listed form, so only its listed key
/// names such a binding.
pub(crate) fn names(key: &str, routing_key: &str, arguments: &FieldTable) -> bool {
    let (quoted, hash) = key.split_once('~').unwrap_or((key, ""));
    let args_match = if hash.is_empty() {
        arguments.is_empty()
    } else {
        !arguments.is_empty() && arguments_hash(arguments) == hash
    };
    args_match && unquote(quoted).as_deref() == Some(routing_key)
}

/// A hash of the arguments that names the binding in paths, so the same across runs and
/// releases (a script may keep a key): FNV-1a over their JSON form (keys sorted).
fn arguments_hash(arguments: &FieldTable) -> String {
    let canonical = super::json::table(arguments).to_string();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// A form value's quoting (`quote_plus`): letters, digits, `-`, `_` and `.` as they are, a
/// space as `+`, every other byte (`~` too) as `%XX`.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// [`quote`] undone (`None` for a malformed `%` escape or bytes that are not UTF-8).
fn unquote(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_hash_is_a_fixed_function_of_their_json() {
        let mut args = FieldTable::new();
        args.insert("x-match", "all");
        args.insert("k", "v");
        // FNV-1a of `{"k":"v","x-match":"all"}`: a key kept by a script stays valid.
        assert_eq!(arguments_hash(&args), "2b79c97ba44a5aad");
    }

    #[test]
    fn keys_are_quoted_so_that_no_two_bindings_share_one() {
        let none = FieldTable::new();
        let mut args = FieldTable::new();
        args.insert("k", "v");
        assert_eq!(properties_key("", &none), "~");
        assert_eq!(properties_key("~", &none), "%7E");
        assert_eq!(properties_key("order.#", &none), "order.%23");
        assert_eq!(properties_key("a b", &none), "a+b");
        let with_args = properties_key("k", &args);
        assert!(with_args.starts_with("k~"), "{with_args}");
        assert_ne!(properties_key("", &args), properties_key("~", &none));
        // A routing key holding what looks like an arguments hash is not a binding with
        // arguments.
        let hash = with_args.split_once('~').unwrap().1.to_owned();
        assert_ne!(properties_key(&format!("k~{hash}"), &none), with_args);
    }

    #[test]
    fn a_key_names_its_binding_listed_or_plain() {
        let none = FieldTable::new();
        let mut args = FieldTable::new();
        args.insert("k", "v");
        for (routing_key, arguments) in [
            ("", &none),
            ("~", &none),
            ("order.#", &none),
            ("x y", &args),
            ("", &args),
        ] {
            let key = properties_key(routing_key, arguments);
            assert!(names(&key, routing_key, arguments), "{key}");
            assert!(!names(&key, "other", arguments), "{key}");
        }
        assert!(names("order.#", "order.#", &none));
        assert!(!names("~", "~", &none));
        assert!(!names("%7E", "", &none));
        assert!(!names("k", "k", &args));
        assert!(!names("%zz", "%zz", &none));
        assert!(!names("%+F", "\u{f}", &none));
    }
}
