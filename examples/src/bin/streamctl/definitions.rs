//! `export_definitions` and `import_definitions`, as `rabbitmqctl` names them: a broker's
//! definitions (users, virtual hosts, permissions, queues, exchanges, bindings) to and from
//! a JSON file, through the management API (RabbitMQ's plugin or `stream-broker`'s), so a
//! topology moves between the two.

use std::io::Read;
use std::path::Path;

use crate::broker::{Target, TargetError};

/// Writes the broker's definitions to `path` (`-`: standard output).
pub fn export(target: &Target, path: &Path) -> Result<(), TargetError> {
    let api = target.required_management("export_definitions", "list definitions")?;
    let definitions = api
        .get("definitions")
        .map_err(|e| TargetError::Failed(e.to_string()))?;
    let mut text = serde_json::to_string_pretty(&definitions)
        .map_err(|e| TargetError::Failed(e.to_string()))?;
    text.push('\n');
    if path == Path::new("-") {
        // As every output: a closed pipe (`| head`) ends the program quietly.
        out!("{text}");
        return Ok(());
    }
    std::fs::write(path, text)
        .map_err(|e| TargetError::Failed(format!("cannot write {}: {e}", path.display())))?;
    if !target.quiet {
        outln!(
            "Exported definitions of {} to \"{}\"",
            api.base(),
            path.display()
        );
    }
    Ok(())
}

/// Imports the definitions in `path` (`-`: standard input) into the broker.
pub fn import(target: &Target, path: &Path) -> Result<(), TargetError> {
    // Refused without an API before anything is read.
    let api = target.required_management("import_definitions", "list definitions")?;
    let mut text = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().lock().read_to_end(&mut text).map(drop)
    } else {
        std::fs::read(path).map(|bytes| text = bytes)
    };
    read.map_err(|e| TargetError::Failed(format!("cannot read {}: {e}", path.display())))?;
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&text) {
        return Err(TargetError::Failed(format!(
            "{} is not JSON definitions: {e}",
            path.display()
        )));
    }
    api.post("definitions", &text)
        .map_err(|e| TargetError::Failed(e.to_string()))?;
    if !target.quiet {
        outln!(
            "Imported definitions from \"{}\" into {}",
            path.display(),
            api.base()
        );
    }
    Ok(())
}
