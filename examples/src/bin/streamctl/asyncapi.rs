//! `streamctl asyncapi`: the AsyncAPI 3.0.0 document of a configuration's bindings, printed
//! without running the service.
//!
//! The configuration does not say which bindings a program consumes, so each binding's role
//! is guessed as `streamctl plan` guesses it (`BindingRole::infer`); `--input` and `--output`
//! say it instead. Payload types live in the program, not in the configuration: the
//! messages' payloads here are `{}` with a description saying so, while the running
//! service's `/asyncapi.json` has the schemas of its listeners' payload types.

use std::path::PathBuf;
use std::process::ExitCode;

use binder_core::asyncapi::Document;
use clap::Args;

/// `streamctl asyncapi`'s arguments.
#[derive(Debug, Args)]
pub struct AsyncApiArgs {
    /// Configuration file (.yaml, .yml or .toml); profile files are looked for beside it.
    #[arg(long)]
    config: PathBuf,
    /// Active profile (repeatable); overrides spring.profiles.active.
    #[arg(long = "profile")]
    profiles: Vec<String>,
    /// A binding the service consumes (repeatable), whatever its configuration suggests.
    #[arg(long = "input")]
    inputs: Vec<String>,
    /// A binding the service publishes to (repeatable), whatever its configuration suggests.
    #[arg(long = "output")]
    outputs: Vec<String>,
    /// The document's `info.version` (default: `info.app.version`, else 0.0.0).
    #[arg(long)]
    version: Option<String>,
}

/// Prints the document; a configuration that does not load, or a binding named with
/// `--input`/`--output` that it does not configure, exits with status 2.
pub fn run(args: AsyncApiArgs) -> ExitCode {
    let config = match super::load(&args.config, args.profiles) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let unknown: Vec<&String> = args
        .inputs
        .iter()
        .chain(&args.outputs)
        .filter(|b| !config.bindings.contains_key(b.as_str()))
        .collect();
    if !unknown.is_empty() {
        for binding in unknown {
            eprintln!(
                "streamctl: `{binding}` is not a binding of {} (spring.cloud.stream.bindings.*)",
                args.config.display()
            );
        }
        return ExitCode::from(2);
    }
    let mut doc = Document::builder(&config);
    for input in &args.inputs {
        doc = doc.input(input.as_str());
    }
    for output in &args.outputs {
        doc = doc.output(output.as_str());
    }
    if let Some(version) = args.version {
        doc = doc.version(version);
    }
    outln!("{}", doc.infer_roles().build());
    ExitCode::SUCCESS
}
