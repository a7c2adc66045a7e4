//! RabbitMQ's health checks of the server's listeners: `GET /api/health/checks/`
//! `port-listener/{port}`, `protocol-listener/{protocol}` and
//! `certificate-expiration/{within}/{unit}` (the TLS listener's certificates), over the
//! listeners the server started ([`super::Listener`]).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Path, State};
use serde_json::{Value, json};

use super::error::ApiError;
use super::health::{Check, Ctx, failed, passed, passed_with};
use crate::envelope::WireEnvelope;
use crate::tls::{CertificateFile, Expiring};

/// `GET /api/health/checks/port-listener/{port}`: a listener of the server listens on
/// `port`. 400 if it is not an integer; an integer no port has fails, as in RabbitMQ.
pub(crate) async fn port_listener<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(port): Path<String>,
) -> Check {
    api.login(&headers, peer)?;
    let port: i128 = port
        .parse()
        .map_err(|_| ApiError::bad_request("Invalid port"))?;
    let ports: Vec<u16> = api.listeners.iter().map(|l| l.addr.port()).collect();
    if ports.iter().any(|p| i128::from(*p) == port) {
        return Ok(passed_with(&[("port", json!(port))]));
    }
    Ok(failed(
        "No active listener",
        &[("missing", json!(port)), ("ports", json!(ports))],
    ))
}

/// `GET /api/health/checks/protocol-listener/{protocol}`: a listener of the server serves
/// `protocol`, in RabbitMQ's names (`amqp`, `amqp/ssl`, `http`) or their aliases.
pub(crate) async fn protocol_listener<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path(protocol): Path<String>,
) -> Check {
    api.login(&headers, peer)?;
    let protocol = protocol_name(&protocol);
    let protocols: Vec<&str> = api.listeners.iter().map(|l| l.protocol).collect();
    if protocols.contains(&protocol.as_str()) {
        return Ok(passed_with(&[("protocol", json!(protocol))]));
    }
    Ok(failed(
        "No active listener",
        &[
            ("missing", json!(protocol)),
            ("protocols", json!(protocols)),
        ],
    ))
}

/// A protocol's name as RabbitMQ names its listeners, from the aliases its check accepts
/// (lower-cased), so that `missing` names what RabbitMQ would. AMQP 1.0's aliases keep their
/// own name: this broker does not speak it (RabbitMQ serves it on its `amqp` listener).
fn protocol_name(asked: &str) -> String {
    let asked = asked.to_lowercase();
    let name = match asked.as_str() {
        "amqp091" | "amqp0.9.1" | "amqp0-9-1" | "amqp0_9_1" => "amqp",
        "amqps" => "amqp/ssl",
        "mqtt3.1" | "mqtt3.1.1" | "mqtt31" | "mqtt311" | "mqtt3_1" | "mqtt3_1_1" => "mqtt",
        "mqtts" | "mqtt+tls" | "mqtt+ssl" => "mqtt/ssl",
        "stomp1.0" | "stomp1.1" | "stomp1.2" | "stomp10" | "stomp11" | "stomp12" | "stomp1_0"
        | "stomp1_1" | "stomp1_2" => "stomp",
        "stomps" | "stomp+tls" | "stomp+ssl" => "stomp/ssl",
        "http1" | "http1.1" | "http_api" | "management" | "management_ui" | "ui" => "http",
        "cli" | "distribution" => "clustering",
        "webmqtt" | "web-mqtt" | "web_mqtt" => "http/web-mqtt",
        "webmqtt/tls" | "web-mqtt/tls" | "webmqtt/ssl" | "web-mqtt/ssl" | "webmqtt+tls"
        | "web-mqtt+tls" | "webmqtt+ssl" | "web-mqtt+ssl" => "https/web-mqtt",
        "webstomp" | "web-stomp" | "web_stomp" => "http/web-stomp",
        "webstomp/tls" | "web-stomp/tls" | "webstomp/ssl" | "web-stomp/ssl" | "webstomp+tls"
        | "web-stomp+tls" | "webstomp+ssl" | "web-stomp+ssl" => "https/web-stomp",
        other => other,
    };
    name.to_string()
}

/// `GET /api/health/checks/certificate-expiration/{within}/{unit}`: no certificate a TLS
/// listener serves (`certfile`) or checks clients against (`cacertfile`) expires within
/// `within` `unit`s, is not yet valid, or cannot be decoded. A negative window checks a date
/// in the past, as in RabbitMQ. The certificates are those the listener was started with.
pub(crate) async fn certificate_expiration<E: WireEnvelope>(
    (State(api), ConnectInfo(peer), headers): Ctx<E>,
    Path((within, unit)): Path<(String, String)>,
) -> Check {
    api.login(&headers, peer)?;
    let window = expiration_window(&within, &unit).map_err(ApiError::bad_request)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let deadline = i128::from(now).saturating_add(window);
    let node = api.node();
    let expiring: Vec<Value> = api
        .listeners
        .iter()
        .filter_map(|listener| {
            let served = listener.certificates.as_ref()?;
            let certfile = failures(&served.certfile, now, deadline);
            let cacertfile = served
                .cacertfile
                .as_ref()
                .map_or_else(Vec::new, |file| failures(file, now, deadline));
            if certfile.is_empty() && cacertfile.is_empty() {
                return None;
            }
            Some(json!({
                "node": node,
                "protocol": listener.protocol,
                "interface": listener.addr.ip().to_string(),
                "port": listener.addr.port(),
                "certfile": served.certfile.path.display().to_string(),
                "cacertfile": served.cacertfile.as_ref().map(|f| f.path.display().to_string()),
                "certfile_expires_on": certfile,
                "cacertfile_expires_on": cacertfile,
            }))
        })
        .collect();
    if expiring.is_empty() {
        return Ok(passed());
    }
    Ok(failed(
        "Certificates expiring",
        &[("expired", expiring.into())],
    ))
}

/// The certificates of a file that fail a check: each one's expiry date, or
/// `{"error": why}` for one not yet valid or that cannot be decoded (as RabbitMQ lists them).
fn failures(file: &CertificateFile, now: u64, deadline: i128) -> Vec<Value> {
    file.validities
        .iter()
        .filter_map(|v| v.failure(now, deadline))
        .map(|failure| match failure {
            Expiring::On(date) => json!(date),
            Expiring::Error(why) => json!({"error": why}),
        })
        .collect()
}

/// A certificate-expiration check's window in seconds (negative for a date in the past,
/// saturating far beyond any certificate's life), or RabbitMQ's words for what is wrong with
/// it. A month is 365/12 days and a year 365 days, as in RabbitMQ.
fn expiration_window(within: &str, unit: &str) -> Result<i128, &'static str> {
    const DAY: i128 = 86_400;
    let within: i128 = within.parse().map_err(|_| "Invalid expiration value.")?;
    let unit = match unit.to_lowercase().as_str() {
        "days" => DAY,
        "weeks" => DAY * 7,
        "months" => DAY * 365 / 12,
        "years" => DAY * 365,
        _ => return Err("Time unit not recognised. Supported units: days, weeks, months, years."),
    };
    Ok(within.saturating_mul(unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_counted_in_rabbitmqs_units_and_saturate() {
        assert_eq!(expiration_window("2", "Weeks"), Ok(14 * 86_400));
        assert_eq!(expiration_window("1", "months"), Ok(2_628_000));
        assert_eq!(expiration_window("-1", "years"), Ok(-365 * 86_400));
        let huge = i128::MAX.to_string();
        assert_eq!(expiration_window(&huge, "years"), Ok(i128::MAX));
        assert_eq!(
            expiration_window("1.5", "days"),
            Err("Invalid expiration value.")
        );
        assert!(expiration_window("1", "hours").is_err());
    }

    #[test]
    fn protocol_aliases_are_rabbitmqs_listener_names() {
        for (asked, name) in [
            ("AMQP091", "amqp"),
            ("amqps", "amqp/ssl"),
            ("management", "http"),
            ("mqtts", "mqtt/ssl"),
            ("web-stomp+tls", "https/web-stomp"),
            ("amqp1.0", "amqp1.0"),
            ("gopher", "gopher"),
        ] {
            assert_eq!(protocol_name(asked), name, "{asked}");
        }
    }
}
