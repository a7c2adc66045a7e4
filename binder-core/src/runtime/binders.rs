//! The binders of an application: instances given in code, and those created from the
//! configuration through their registration, one per binder configuration.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::binder::{Binder, BinderError, registered};
use crate::config::StreamConfig;

/// Why no binder could be had for a binding.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum BinderLookupError {
    /// A binder given in code refused its configuration's environment.
    #[error("binding `{binding}`: binder `{binder}` given in code: {source}")]
    Configure {
        /// The binding.
        binding: String,
        /// The binder configuration name.
        binder: String,
        /// The binder's refusal.
        source: BinderError,
    },
    /// No binder of the type is linked into the program nor given in code.
    #[error(
        "binding `{binding}` uses binder `{binder}` (type `{binder_type}`), which is not available in this program (available: {}); add the binder crate as a dependency or give an instance with AppBuilder::binder",
        if available.is_empty() { "none".to_owned() } else { available.join(", ") }
    )]
    Unavailable {
        /// The binding.
        binding: String,
        /// The binder configuration name.
        binder: String,
        /// Its type.
        binder_type: String,
        /// The binder types and names that are available, sorted.
        available: Vec<String>,
    },
    /// The binder's registration could not create it.
    #[error("binding `{binding}`: cannot create binder `{binder}`: {source}")]
    Create {
        /// The binding.
        binding: String,
        /// The binder configuration name.
        binder: String,
        /// Why.
        source: BinderError,
    },
}

/// The binders of an application: instances given in code, and those created from the
/// configuration through their registration, one per binder configuration.
pub(crate) struct Binders {
    explicit: HashMap<String, Arc<dyn Binder>>,
    created: Mutex<HashMap<String, Arc<dyn Binder>>>,
    /// Binder configurations whose environment an instance given in code has taken.
    configured: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Binders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binders")
            .field("explicit", &self.explicit.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Binders {
    /// The binders given in code, by configuration name or type; the others are created when
    /// a binding first needs them.
    pub(crate) fn new(explicit: HashMap<String, Arc<dyn Binder>>) -> Self {
        Binders {
            explicit,
            created: Mutex::new(HashMap::new()),
            configured: Mutex::new(HashSet::new()),
        }
    }

    /// The binder that carries a binding.
    pub(crate) fn for_binding(
        &self,
        config: &StreamConfig,
        binding: &str,
    ) -> Result<Arc<dyn Binder>, BinderLookupError> {
        let name = config.binder_for(binding);
        let binder_type = config.binder_type(&name);
        if let Some(b) = self
            .explicit
            .get(&name)
            .or_else(|| self.explicit.get(&binder_type))
        {
            // Once per binder configuration and application, not per binding or destination.
            let first = self
                .configured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.clone());
            if first {
                if let Err(source) = b.configure(&config.binder_environment_ref(&name)) {
                    return Err(BinderLookupError::Configure {
                        binding: binding.to_owned(),
                        binder: name,
                        source,
                    });
                }
            }
            return Ok(b.clone());
        }
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = created.get(&name) {
            return Ok(b.clone());
        }
        let Some(registration) = registered().find(|r| r.binder_type == binder_type) else {
            let mut available: Vec<String> =
                registered().map(|r| r.binder_type.to_owned()).collect();
            available.extend(self.explicit.keys().cloned());
            available.sort_unstable();
            available.dedup();
            return Err(BinderLookupError::Unavailable {
                binding: binding.to_owned(),
                binder: name,
                binder_type,
                available,
            });
        };
        let env = config.binder_environment_ref(&name);
        let binder = (registration.create)(&env).map_err(|source| BinderLookupError::Create {
            binding: binding.to_owned(),
            binder: name.clone(),
            source,
        })?;
        created.insert(name, binder.clone());
        Ok(binder)
    }

    /// The binders this application created (and so closes); instances given with
    /// `AppBuilder::binder` belong to the caller, who may share them between applications.
    pub(crate) fn owned(&self) -> Vec<Arc<dyn Binder>> {
        self.created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}
