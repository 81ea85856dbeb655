//! `include/perfsupport.h` is what cbindgen makes of the sources today.

use std::path::Path;

#[test]
fn the_committed_header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let committed_path = crate_dir.join("include/perfsupport.h");
    if std::env::var_os("PERFSUPPORT_BLESS").is_some() {
        std::fs::write(&committed_path, &generated).expect("write the header");
        return;
    }
    let committed = std::fs::read(&committed_path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: run `PERFSUPPORT_BLESS=1 cargo test --release -p perfsupport-capi --test header` and commit it",
        committed_path.display()
    );
}

#[test]
fn the_version_macros_are_the_crate_version() {
    let header = include_str!("../include/perfsupport.h");
    let define = |name: &str| -> String {
        let prefix = format!("#define {name} ");
        (header.lines())
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name} in the header"))
            .trim()
            .to_string()
    };
    assert_eq!(
        define("PERFSUPPORT_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MAJOR")
    );
    assert_eq!(
        define("PERFSUPPORT_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    assert_eq!(
        define("PERFSUPPORT_VERSION_PATCH"),
        env!("CARGO_PKG_VERSION_PATCH")
    );
    let pc = include_str!("../perfsupport.pc");
    assert!(
        pc.contains(&format!("Version: {}\n", env!("CARGO_PKG_VERSION"))),
        "perfsupport.pc has another version"
    );
}
