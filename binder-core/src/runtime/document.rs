//! A started application's AsyncAPI document, built the first time it is asked for
//! (`RunningApp::asyncapi`, the management server's `/asyncapi.json`), not at every start:
//! with thousands of bindings building it took most of `App::start`. What it is built from
//! is taken at start, so it is the document `AppBuilder::asyncapi` gives just before.

use std::sync::{Arc, OnceLock};

use crate::asyncapi::{Document, PayloadType};
use crate::config::StreamConfig;

/// What an application's AsyncAPI document says, as the application was when it started.
#[derive(Debug, Clone)]
pub(crate) struct DocumentPlan {
    config: Arc<StreamConfig>,
    /// Each listener's input and its payload type, in the order the listeners were given.
    inputs: Vec<(String, Option<PayloadType>)>,
    /// The output bindings, in the order declared.
    outputs: Vec<String>,
    /// Payload types registered with `AppBuilder::payload`, by binding.
    payloads: Vec<(String, PayloadType)>,
}

impl DocumentPlan {
    /// A plan of the document of an application with this configuration, these listeners'
    /// inputs (with their payload types, in the order given), these outputs and these
    /// registered payload types (`Blueprint::document_plan` takes them).
    pub(crate) fn new(
        config: Arc<StreamConfig>,
        inputs: Vec<(String, Option<PayloadType>)>,
        outputs: Vec<String>,
        payloads: Vec<(String, PayloadType)>,
    ) -> Self {
        DocumentPlan {
            config,
            inputs,
            outputs,
            payloads,
        }
    }

    /// The document: the listeners' inputs with their payload types, then the outputs, then
    /// the registered payload types.
    pub(crate) fn document(&self) -> Document {
        let mut doc = Document::builder(&self.config);
        for (input, payload) in &self.inputs {
            doc = doc.input(input.as_str());
            if let Some(payload) = payload {
                doc = doc.payload(input.as_str(), *payload);
            }
        }
        for output in &self.outputs {
            doc = doc.output(output.as_str());
        }
        for (binding, payload) in &self.payloads {
            doc = doc.payload(binding.as_str(), *payload);
        }
        doc.build()
    }
}

/// A started application's document: built once, on first use, from the plan taken at start.
#[derive(Debug)]
pub(crate) struct LazyDocument {
    plan: DocumentPlan,
    built: OnceLock<Document>,
}

impl LazyDocument {
    /// The document of `plan`, not built yet.
    pub(crate) fn new(plan: DocumentPlan) -> Self {
        LazyDocument {
            plan,
            built: OnceLock::new(),
        }
    }

    /// The document, built now if this is the first time it is asked for.
    pub(crate) fn get(&self) -> &Document {
        self.built.get_or_init(|| self.plan.document())
    }

    /// The document if it was built already.
    #[cfg(feature = "management")]
    pub(crate) fn built(&self) -> Option<&Document> {
        self.built.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigLoader;

    fn plan() -> DocumentPlan {
        let config = ConfigLoader::new()
            .env(Vec::<(String, String)>::new())
            .yaml_str(
                "spring.cloud.stream.bindings:\n  a-in: {destination: a, group: g}\n  b-out: {destination: b}\n",
            )
            .load()
            .unwrap();
        struct Order;
        DocumentPlan {
            config: Arc::new(config),
            inputs: vec![("a-in".into(), Some(PayloadType::without_schema::<Order>()))],
            outputs: vec!["b-out".into()],
            payloads: Vec::new(),
        }
    }

    #[test]
    fn the_document_is_built_on_first_use_and_once() {
        let lazy = LazyDocument::new(plan());
        assert!(lazy.built.get().is_none(), "built before it was asked for");
        let first: *const Document = lazy.get();
        assert_eq!(lazy.get(), &plan().document());
        assert!(std::ptr::eq(first, lazy.get()), "built twice");
        let doc = lazy.get().as_json();
        assert_eq!(doc["operations"]["a-in"]["action"], "receive");
        assert_eq!(doc["operations"]["b-out"]["action"], "send");
    }
}
