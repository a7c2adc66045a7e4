//! A client of the management HTTP API: RabbitMQ's management plugin, or `stream-broker`'s
//! `[management]` listener, which serves the same paths and JSON fields.

use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use binder_rabbit::uri_component;

/// Why a management API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ManagementError {
    /// The URL is not one this client can use.
    #[error("management URL `{url}`: {reason}")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Nothing answered, or the answer was not HTTP.
    #[error("management API at {url}: {source}")]
    Unreachable {
        /// The URL called.
        url: String,
        /// The transport's error.
        source: Box<ureq::Error>,
    },
    /// The API answered with an error status.
    #[error("management API {url}: HTTP {status}{}", body_note(.body))]
    Status {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The reason the API gave, if any.
        body: String,
    },
}

fn body_note(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(": {body}")
    }
}

/// A management API at one base URL, with HTTP basic credentials.
#[derive(Debug)]
pub struct Management {
    base: String,
    authorization: String,
    agent: ureq::Agent,
}

impl Management {
    /// A client of the API at `base` (`http://host:port`, with or without a trailing `/`).
    /// Credentials in the URL (`http://user:pass@host:port`) win over `user` and `password`.
    pub fn new(base: &str, user: &str, password: &str) -> Result<Self, ManagementError> {
        let bad = |reason| ManagementError::Url {
            url: base.to_owned(),
            reason,
        };
        let Some(rest) = base.strip_prefix("http://") else {
            return Err(bad(
                "only http:// is supported (put a TLS-terminating proxy in front, or use --no-management)",
            ));
        };
        let rest = rest.trim_end_matches('/');
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (credentials, host) = match authority.rsplit_once('@') {
            Some((creds, host)) => (Some(creds), host),
            None => (None, authority),
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let (user, password) = match credentials {
            Some(creds) => match creds.split_once(':') {
                Some((u, p)) => (decode(u), decode(p)),
                None => (decode(creds), String::new()),
            },
            None => (user.to_owned(), password.to_owned()),
        };
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(2)))
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Management {
            base: format!("http://{host}{path}"),
            authorization: format!("Basic {token}"),
            agent,
        })
    }

    /// The base URL, without credentials (for messages).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Whether something answers HTTP there (any status).
    pub fn answers(&self) -> bool {
        self.agent
            .get(format!("{}/api/overview", self.base))
            .header("Authorization", &self.authorization)
            .config()
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .call()
            .is_ok()
    }

    /// `GET /api/<path>` as JSON.
    pub fn get(&self, path: &str) -> Result<Value, ManagementError> {
        let url = format!("{}/api/{path}", self.base);
        let mut response = self
            .agent
            .get(&url)
            .header("Authorization", &self.authorization)
            .call()
            .map_err(|e| ManagementError::Unreachable {
                url: url.clone(),
                source: Box::new(e),
            })?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().unwrap_or_default();
        if status != 200 {
            return Err(ManagementError::Status {
                url,
                status,
                body: reason(&body),
            });
        }
        serde_json::from_str(&body).map_err(|e| ManagementError::Status {
            url,
            status,
            body: format!("not JSON: {e}"),
        })
    }

    /// `POST /api/<path>` with a JSON body; any 2xx status is success.
    pub fn post(&self, path: &str, body: &[u8]) -> Result<(), ManagementError> {
        let url = format!("{}/api/{path}", self.base);
        let response = self
            .agent
            .post(&url)
            .header("Authorization", &self.authorization)
            .header("Content-Type", "application/json")
            .send(body);
        done(url, response)
    }

    /// `PUT /api/<path>` with a JSON body; any 2xx status is success.
    pub fn put(&self, path: &str, body: &[u8]) -> Result<(), ManagementError> {
        let url = format!("{}/api/{path}", self.base);
        let response = self
            .agent
            .put(&url)
            .header("Authorization", &self.authorization)
            .header("Content-Type", "application/json")
            .send(body);
        done(url, response)
    }

    /// `DELETE /api/<path>` with more headers; any 2xx status is success.
    pub fn delete(&self, path: &str, headers: &[(&str, &str)]) -> Result<(), ManagementError> {
        let url = format!("{}/api/{path}", self.base);
        let mut request = self
            .agent
            .delete(&url)
            .header("Authorization", &self.authorization);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        done(url, request.call())
    }

    /// The objects of a list endpoint (`queues`, `exchanges`, `bindings`, `consumers`) in
    /// `vhost`; for `connections` and `channels`, of `vhost` if given, else of all.
    pub fn list(&self, what: &str, vhost: Option<&str>) -> Result<Vec<Value>, ManagementError> {
        let path = match (what, vhost) {
            ("connections" | "channels", Some(v)) => format!("vhosts/{}/{what}", uri_component(v)),
            (_, Some(v)) => format!("{what}/{}", uri_component(v)),
            (_, None) => what.to_owned(),
        };
        match self.get(&path)? {
            Value::Array(items) => Ok(items),
            other => Err(ManagementError::Status {
                url: format!("{}/api/{path}", self.base),
                status: 200,
                body: format!("expected a JSON array, got {}", kind(&other)),
            }),
        }
    }
}

/// A call whose answer has no body to read: any 2xx status is success, else the API's
/// reason.
fn done(
    url: String,
    response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<(), ManagementError> {
    let mut response = response.map_err(|e| ManagementError::Unreachable {
        url: url.clone(),
        source: Box::new(e),
    })?;
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(());
    }
    let body = response.body_mut().read_to_string().unwrap_or_default();
    Err(ManagementError::Status {
        url,
        status,
        body: reason(&body),
    })
}

/// The `reason` (or `error`) of an error body, else the body itself, shortened.
fn reason(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        for field in ["reason", "error"] {
            if let Some(text) = v.get(field).and_then(Value::as_str) {
                return text.to_owned();
            }
        }
    }
    body.chars().take(200).collect()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Undoes percent-encoding (credentials in a URL).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
