//! Where a binding's extension properties are kept: one value per registered namespace,
//! of a type only its binder knows (see [`Extension`](super::Extension)).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use config::Value;

use super::error::Problems;
use super::node::Section;

/// An extension's value behind a type-erased pointer, so that the loader can read sections
/// whose types it does not know.
pub(crate) trait StoredExtension: Any + fmt::Debug + Send + Sync {
    fn merge_section(&mut self, value: &Value, path: &str, problems: &mut Problems);
    fn clone_box(&self) -> Box<dyn StoredExtension>;
    fn same_as(&self, other: &dyn StoredExtension) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<T> StoredExtension for T
where
    T: Section + Clone + PartialEq + fmt::Debug + Send + Sync + 'static,
{
    fn merge_section(&mut self, value: &Value, path: &str, problems: &mut Problems) {
        Section::merge_table(self, value, path, problems);
    }
    fn clone_box(&self) -> Box<dyn StoredExtension> {
        Box::new(self.clone())
    }
    fn same_as(&self, other: &dyn StoredExtension) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The extension properties of one binding, one value per registered namespace (its
/// defaults when nothing was written for it).
#[derive(Clone, Default)]
pub struct Extensions(Vec<(&'static str, Arc<dyn StoredExtension>)>);

impl Extensions {
    /// The properties of type `T`, if a namespace of that type is registered.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0
            .iter()
            .find_map(|(_, v)| v.as_any().downcast_ref::<T>())
    }

    /// The namespaces present.
    pub fn namespaces(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.0.iter().map(|(ns, _)| *ns)
    }

    pub(crate) fn insert(&mut self, namespace: &'static str, value: Box<dyn StoredExtension>) {
        self.insert_shared(namespace, Arc::from(value));
    }

    /// Adds a namespace whose properties are shared (a template no binding changed).
    pub(crate) fn insert_shared(
        &mut self,
        namespace: &'static str,
        value: Arc<dyn StoredExtension>,
    ) {
        self.0.push((namespace, value));
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static str, &dyn StoredExtension)> {
        self.0.iter().map(|(ns, v)| (*ns, v.as_ref()))
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(ns, v)| (ns, v)))
            .finish()
    }
}

impl PartialEq for Extensions {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((a, x), (b, y))| a == b && (Arc::ptr_eq(x, y) || x.same_as(y.as_ref())))
    }
}
