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
