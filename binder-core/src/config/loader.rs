//! Finding, layering and reading configuration files.

use std::path::{Path, PathBuf};

use config::{Config, File, FileFormat, Value, ValueKind};

use super::env;
use super::error::{ConfigError, Problems};
use super::extension::{ExtensionRegistration, registered_extensions};
use super::key::descend;
use super::model::{BUILTIN_BINDER_TYPES, StreamConfig};
use super::node::FieldValue;
use super::read;

/// Variable naming an explicit configuration file.
pub const CONFIG_FILE_VAR: &str = "STREAM_CONFIG";

/// Variable naming the active profiles (comma-separated).
pub const PROFILES_VAR: &str = "SPRING_PROFILES_ACTIVE";

/// File stem searched in the working directory.
pub const DEFAULT_STEM: &str = "application";

/// Extensions tried, lowest precedence first.
const EXTENSIONS: &[(&str, FileFormat)] = &[
    ("yaml", FileFormat::Yaml),
    ("yml", FileFormat::Yaml),
    ("toml", FileFormat::Toml),
];

/// Loads a [`StreamConfig`]. Precedence, lowest first: `application.{yaml,yml,toml}` (or the
/// explicit file), profile files `application-<profile>.*` in profile order,
/// `SPRING_APPLICATION_JSON`, relaxed environment variables, values set with
/// [`ConfigLoader::set`].
///
/// ```
/// use binder_core::config::ConfigLoader;
///
/// let dir = std::env::temp_dir().join(format!("doc-loader-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("application.yaml"), "
/// spring.cloud.stream.bindings.input:
///   destination: orders
///   group: billing
/// ").unwrap();
/// let cfg = ConfigLoader::new().dir(&dir).env(Vec::<(String, String)>::new()).load().unwrap();
/// assert_eq!(cfg.binding("input").group.as_deref(), Some("billing"));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug, Clone, Default)]
pub struct ConfigLoader {
    dir: Option<PathBuf>,
    file: Option<PathBuf>,
    profiles: Option<Vec<String>>,
    env: Option<Vec<(String, String)>>,
    overrides: Vec<(String, Value)>,
    binder_types: Vec<String>,
    extensions: Vec<&'static ExtensionRegistration>,
    text: Option<(String, FileFormat)>,
}

impl ConfigLoader {
    /// A loader reading the working directory and the process environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Searches `dir` instead of the working directory.
    pub fn dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Reads this file instead of searching (profiles are looked for next to it).
    pub fn file(mut self, file: impl AsRef<Path>) -> Self {
        self.file = Some(file.as_ref().to_owned());
        self
    }

    /// Reads configuration text instead of files (for tests and embedded defaults).
    pub fn yaml_str(mut self, text: &str) -> Self {
        self.text = Some((text.to_owned(), FileFormat::Yaml));
        self
    }

    /// Reads TOML text instead of files.
    pub fn toml_str(mut self, text: &str) -> Self {
        self.text = Some((text.to_owned(), FileFormat::Toml));
        self
    }

    /// Activates these profiles, ignoring `SPRING_PROFILES_ACTIVE` and `spring.profiles.active`.
    pub fn profiles<S: Into<String>>(mut self, profiles: impl IntoIterator<Item = S>) -> Self {
        self.profiles = Some(profiles.into_iter().map(Into::into).collect());
        self
    }

    /// Uses these variables instead of the process environment.
    pub fn env<K: Into<String>, V: Into<String>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.env = Some(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        );
        self
    }

    /// Sets a key (dotted path) over everything else.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.overrides.push((key.into(), value.into()));
        self
    }

    /// Allows binder types registered besides `embedded` and `rabbit`.
    pub fn binder_type(mut self, name: impl Into<String>) -> Self {
        self.binder_types.push(name.into());
        self
    }

    /// Knows an extension namespace besides those registered with `inventory` (for a binder
    /// whose registrations the linker may have left out).
    pub fn extension(mut self, registration: &'static ExtensionRegistration) -> Self {
        self.extensions.push(registration);
        self
    }

    fn vars(&self) -> Vec<(String, String)> {
        match &self.env {
            Some(vars) => vars.clone(),
            None => std::env::vars().collect(),
        }
    }

    /// The files to read before profiles, and the directory and stem profiles are found by.
    fn base_files(
        &self,
        vars: &[(String, String)],
    ) -> Result<Vec<(PathBuf, FileFormat)>, ConfigError> {
        let explicit = self.file.clone().or_else(|| {
            vars.iter()
                .find(|(k, _)| k == CONFIG_FILE_VAR)
                .map(|(_, v)| PathBuf::from(v))
        });
        if let Some(path) = explicit {
            let format = format_of(&path)?;
            if !path.is_file() {
                return Err(ConfigError::File {
                    path: path.display().to_string(),
                    reason: "no such file".to_owned(),
                });
            }
            return Ok(vec![(path, format)]);
        }
        let dir = self.dir.clone().unwrap_or_else(|| PathBuf::from("."));
        Ok(find(&dir, DEFAULT_STEM))
    }

    /// Loads, layers and validates the configuration.
    pub fn load(&self) -> Result<StreamConfig, ConfigError> {
        let vars = self.vars();
        let base = match &self.text {
            Some(_) => Vec::new(),
            None => self.base_files(&vars)?,
        };
        let base_tree = self.build(&base)?;

        let profiles = match &self.profiles {
            Some(p) => p.clone(),
            None => match vars.iter().find(|(k, _)| k == PROFILES_VAR) {
                Some((_, v)) => split_list(v),
                None => profiles_in(&base_tree)?,
            },
        };
        let mut files = base.clone();
        if let Some((first, _)) = base.first() {
            let dir = first.parent().map(Path::to_owned).unwrap_or_default();
            let stem = first
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(DEFAULT_STEM)
                .to_owned();
            for profile in &profiles {
                files.extend(find(&dir, &format!("{stem}-{profile}")));
            }
        } else if self.text.is_none() {
            let dir = self.dir.clone().unwrap_or_else(|| PathBuf::from("."));
            for profile in &profiles {
                files.extend(find(&dir, &format!("{DEFAULT_STEM}-{profile}")));
            }
        }
        let mut root = self.build(&files)?;

        let mut problems = Problems::default();
        env::apply(&mut root, &vars, &mut problems);
        for (key, value) in &self.overrides {
            let mut tree = value.clone();
            for segment in key.rsplit('.') {
                let mut table = super::node::Table::new();
                table.insert(segment.to_owned(), tree);
                tree = Value::new(None, ValueKind::Table(table));
            }
            env::merge(&mut root, tree);
        }
        if !problems.0.is_empty() {
            return Err(ConfigError::Invalid(problems.0));
        }

        let mut binder_types: Vec<String> = BUILTIN_BINDER_TYPES
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        binder_types.extend(self.binder_types.iter().cloned());
        let sources = files.iter().map(|(p, _)| p.display().to_string()).collect();
        let mut extensions = registered_extensions();
        for extra in &self.extensions {
            if !extensions.iter().any(|e| e.namespace == extra.namespace) {
                extensions.push(extra);
            }
        }
        read::read(root, &binder_types, &extensions, profiles, sources)
    }

    /// Reads each source on its own, expands its dotted keys, and merges them in order, so a
    /// later file wins whichever key style either file uses.
    fn build(&self, files: &[(PathBuf, FileFormat)]) -> Result<Value, ConfigError> {
        let mut root = Value::new(None, ValueKind::Table(super::node::Table::new()));
        if let Some((text, format)) = &self.text {
            let tree = read_source(File::from_str(text, *format), "configuration text")?;
            env::merge(&mut root, tree);
        }
        for (path, format) in files {
            let source = File::from(path.as_path()).format(*format).required(true);
            let tree = read_source(source, &path.display().to_string())?;
            env::merge(&mut root, tree);
        }
        Ok(root)
    }
}

fn read_source<S: config::Source + Send + Sync + 'static>(
    source: S,
    name: &str,
) -> Result<Value, ConfigError> {
    let built = Config::builder()
        .add_source(source)
        .build()
        .map_err(|e| ConfigError::File {
            path: name.to_owned(),
            reason: e.to_string(),
        })?;
    let mut tree = built.cache;
    env::expand_dotted(&mut tree);
    Ok(tree)
}

fn format_of(path: &Path) -> Result<FileFormat, ConfigError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    EXTENSIONS
        .iter()
        .find(|(e, _)| e.eq_ignore_ascii_case(ext))
        .map(|(_, f)| *f)
        .ok_or_else(|| ConfigError::File {
            path: path.display().to_string(),
            reason: "unknown format: the file name must end in .yaml, .yml or .toml".to_owned(),
        })
}

fn find(dir: &Path, stem: &str) -> Vec<(PathBuf, FileFormat)> {
    EXTENSIONS
        .iter()
        .map(|(ext, format)| (dir.join(format!("{stem}.{ext}")), *format))
        .filter(|(p, _)| p.is_file())
        .collect()
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn profiles_in(tree: &Value) -> Result<Vec<String>, ConfigError> {
    let Some(v) = descend(tree, &["spring", "profiles", "active"]) else {
        return Ok(Vec::new());
    };
    let mut problems = Problems::default();
    let list = Vec::<String>::parse(v, "spring.profiles.active", &mut problems);
    problems.into_result(list.unwrap_or_default())
}
