//! Golden tests of the topology plan: each `tests/plans/<case>.yaml` plans to exactly
//! `tests/plans/<case>.json`. Run with `UPDATE_GOLDEN=1` to rewrite the JSON after a deliberate
//! change, then review the diff.

use std::fs;
use std::path::PathBuf;

use binder_amqp::topology;
use binder_core::config::ConfigLoader;

fn cases() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/plans");
    let mut cases: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 9,
        "plan cases are missing from {}",
        dir.display()
    );
    cases
}

#[test]
fn plans_match_their_golden_json() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut failures = Vec::new();
    for case in cases() {
        let cfg = ConfigLoader::new()
            .file(&case)
            .env(Vec::<(String, String)>::new())
            .load()
            .unwrap_or_else(|e| panic!("{}: {e}", case.display()));
        let plan = topology::plan(&cfg).unwrap();
        let actual = serde_json::to_string_pretty(&plan).unwrap() + "\n";
        let golden = case.with_extension("json");
        if update {
            fs::write(&golden, &actual).unwrap();
            continue;
        }
        let expected = fs::read_to_string(&golden)
            .unwrap_or_else(|_| panic!("missing {}; run with UPDATE_GOLDEN=1", golden.display()));
        if expected != actual {
            failures.push(format!(
                "{}:\n--- expected\n{expected}\n--- actual\n{actual}",
                case.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
