//! The management server's configuration, in Spring Boot's names (`management.*`): the port
//! and address of the server, the base path, which endpoints are exposed and at which
//! paths, and how much the health endpoint tells. The server itself is the runtime's
//! (`binder_core::runtime` with the `management` feature).

use std::collections::BTreeMap;
use std::net::IpAddr;

use config::Value;

use super::error::Problems;
use super::key::descend;
use super::node::FieldValue;
use crate::{keyword_enum, properties};

/// The key path of the management tree.
pub const MANAGEMENT_PREFIX: &str = "management";

/// The endpoints the management server knows, by id (`asyncapi` serves the AsyncAPI document
/// at `<base-path>/asyncapi.json`). A new endpoint adds its id here (the
/// exposure and path-mapping keys are checked against this list) and its routes in the
/// runtime's management router.
pub const ENDPOINT_IDS: &[&str] = &["health", "bindings", "prometheus", "asyncapi"];

keyword_enum! {
    /// What `/health` shows besides the overall status
    /// (`management.endpoint.health.show-details`).
    pub enum ShowDetails {
        /// The status only (Spring Boot's default).
        Never => "never",
        /// The status of each component (binders, bindings) and its details.
        Always => "always",
    }
}

// A `properties!` check takes the field's own type.
#[allow(clippy::ptr_arg)]
fn endpoint_ids(ids: &Vec<String>) -> Result<(), String> {
    match ids
        .iter()
        .find(|id| *id != "*" && !ENDPOINT_IDS.contains(&id.as_str()))
    {
        Some(id) => Err(format!(
            "unknown endpoint `{id}`; expected `*` or some of: {}",
            ENDPOINT_IDS.join(", ")
        )),
        None => Ok(()),
    }
}

fn mapped_ids(map: &BTreeMap<String, String>) -> Result<(), String> {
    match map.keys().find(|id| !ENDPOINT_IDS.contains(&id.as_str())) {
        Some(id) => Err(format!(
            "unknown endpoint `{id}`; expected some of: {}",
            ENDPOINT_IDS.join(", ")
        )),
        None => match map.iter().find(|(_, path)| clean(path).is_empty()) {
            Some((id, _)) => Err(format!("the path of endpoint `{id}` is empty")),
            None => Ok(()),
        },
    }
}

fn address(address: &Option<String>) -> Result<(), String> {
    match address {
        Some(a) if a.parse::<IpAddr>().is_err() => Err(format!(
            "`{a}` is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::1)"
        )),
        _ => Ok(()),
    }
}

fn port(port: &Option<u16>) -> Result<(), String> {
    if port.is_some() && !cfg!(feature = "management") {
        return Err(
            "the management server is not built into this program: enable binder-core's `management` feature, or remove the port".to_owned(),
        );
    }
    Ok(())
}

#[allow(clippy::ptr_arg)]
fn base_path(path: &String) -> Result<(), String> {
    if path.is_empty() || path.starts_with('/') {
        Ok(())
    } else {
        Err(format!("must start with `/`, found `{path}`"))
    }
}

properties! {
    /// `management.server.*`.
    pub struct ServerProperties {
        /// The port; none means no server at all. 0 picks a free port.
        port: Option<u16> = None => "port", check port;
        /// The address to listen on (default: every interface, as Spring Boot).
        address: Option<String> = None => "address", check address;
    }
}

properties! {
    /// `management.endpoints.web.exposure.*`.
    pub struct ExposureProperties {
        /// Endpoint ids to expose, `*` for all (default: `health`).
        include: Vec<String> = vec!["health".to_owned()] => "include", check endpoint_ids;
        /// Endpoint ids not to expose, `*` for all; wins over `include`.
        exclude: Vec<String> = Vec::new() => "exclude", check endpoint_ids;
    }
}

properties! {
    /// `management.endpoints.web.*`.
    pub struct WebProperties {
        /// The path every endpoint is under (default `/actuator`; `/` or empty for the root).
        base_path: String = "/actuator".to_owned() => "basePath", check base_path;
        /// Which endpoints are exposed.
        exposure: ExposureProperties = ExposureProperties::default() => "exposure";
        /// An endpoint's path under the base path, by id, instead of its id
        /// (`prometheus: metrics` serves the scrape at `/actuator/metrics`).
        path_mapping: BTreeMap<String, String> = BTreeMap::new() => "pathMapping", check mapped_ids;
    }
}

properties! {
    /// `management.endpoints.*`.
    pub struct EndpointsProperties {
        /// The HTTP side.
        web: WebProperties = WebProperties::default() => "web";
    }
}

properties! {
    /// `management.endpoint.health.*`.
    pub struct HealthEndpointProperties {
        /// What the health endpoint shows besides the status (default `never`).
        show_details: ShowDetails = ShowDetails::Never => "showDetails";
    }
}

properties! {
    /// `management.endpoint.*`: each endpoint's own settings.
    pub struct EndpointProperties {
        /// The health endpoint.
        health: HealthEndpointProperties = HealthEndpointProperties::default() => "health";
    }
}

properties! {
    /// `management.*`: the management server (health, bindings, Prometheus metrics over
    /// HTTP), in Spring Boot's names. Without `server.port` nothing is started.
    ///
    /// ```
    /// use binder_core::config::ConfigLoader;
    ///
    /// let cfg = ConfigLoader::new()
    ///     .env(Vec::<(String, String)>::new())
    ///     .yaml_str("
    /// management:
    ///   server.port: 8081
    ///   endpoints.web:
    ///     exposure.include: health,prometheus
    ///     path-mapping.prometheus: metrics
    /// ")
    ///     .load()
    ///     .unwrap();
    /// let m = &cfg.management;
    /// assert_eq!(m.server.port, Some(8081));
    /// assert!(m.exposed("prometheus") && !m.exposed("bindings"));
    /// assert_eq!(m.path("prometheus"), "/actuator/metrics");
    /// assert_eq!(m.path("health"), "/actuator/health");
    /// ```
    pub struct ManagementConfig {
        /// Where the server listens.
        server: ServerProperties = ServerProperties::default() => "server";
        /// Which endpoints, where.
        endpoints: EndpointsProperties = EndpointsProperties::default() => "endpoints";
        /// Each endpoint's own settings.
        endpoint: EndpointProperties = EndpointProperties::default() => "endpoint";
    }
}

/// A path without its leading and trailing slashes.
fn clean(path: &str) -> &str {
    path.trim_matches('/')
}

impl ManagementConfig {
    /// Reads `management.*` from the merged tree; unknown keys are problems naming them.
    pub(crate) fn read(root: &Value, problems: &mut Problems) -> Self {
        let mut out = ManagementConfig::default();
        if let Some(tree) = descend(root, &[MANAGEMENT_PREFIX]) {
            <Self as FieldValue>::merge(&mut out, tree, MANAGEMENT_PREFIX, problems);
        }
        out
    }

    /// Whether the server is to run (a port is set).
    pub fn enabled(&self) -> bool {
        self.server.port.is_some()
    }

    /// The address to listen on (every interface unless `management.server.address` says).
    pub fn address(&self) -> IpAddr {
        self.server
            .address
            .as_deref()
            .and_then(|a| a.parse().ok())
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    /// Whether an endpoint is exposed: included (by id or `*`) and not excluded.
    pub fn exposed(&self, id: &str) -> bool {
        let exposure = &self.endpoints.web.exposure;
        let named = |list: &[String]| list.iter().any(|e| e == "*" || e == id);
        named(&exposure.include) && !named(&exposure.exclude)
    }

    /// An endpoint's path: the base path, then its mapped path or its own (its id; the
    /// AsyncAPI document's is `asyncapi.json`, as the tools that read it expect).
    pub fn path(&self, id: &str) -> String {
        let base = clean(&self.endpoints.web.base_path);
        let default = match id {
            "asyncapi" => "asyncapi.json",
            other => other,
        };
        let own = self
            .endpoints
            .web
            .path_mapping
            .get(id)
            .map_or(default, |p| clean(p));
        if base.is_empty() {
            format!("/{own}")
        } else {
            format!("/{base}/{own}")
        }
    }
}
