//! The cost of one perf map entry and of one jitdump region (frame-pointer
//! unwind info and a 3-row line table) through the C API, against the same
//! work through the Rust API, measured in one process and one run.
//!
//! The C API is reached the way a C VM would load it as a plugin:
//! `dlopen` of `libperfsupport.so` in Cargo's release directory. Run through
//! `bench/capi_cost.sh`, which builds the library first and prints a
//! markdown table (rows: operation; columns: ns per call for C and Rust, and
//! their ratio). Each figure is the best of several rounds.

use ps::unwind::CallFrameInfo;
use ps::{CodeRegion, JitDump, LineEntry, PerfMap, ProfilerSink, Profilers};
use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::time::Instant;

/// The C structs, as in perfsupport.h (the header is generated from the
/// same definitions).
#[repr(C)]
struct CLine {
    offset: u32,
    file: *const c_char,
    line: u32,
    column: u32,
}
#[repr(C)]
struct CUnwind {
    kind: u32,
    rows: *const c_void,
    row_count: usize,
}
#[repr(C)]
struct CRegion {
    code: *const c_void,
    size: usize,
    name: *const c_char,
    unwind: *const CUnwind,
    lines: *const CLine,
    line_count: usize,
}

type WriteEntry = unsafe extern "C" fn(*const c_void, c_uint, *const c_char) -> c_int;
type Open = unsafe extern "C" fn(u32, *const c_char, *mut *mut c_void) -> c_int;
type Register = unsafe extern "C" fn(*const c_void, *const CRegion, usize) -> c_int;
type Finish = unsafe extern "C" fn(*mut c_void) -> c_int;

/// Resolves `name` in `lib`.
fn symbol<T: Copy>(lib: *mut c_void, name: &str) -> T {
    let cname = CString::new(name).unwrap();
    // SAFETY: `lib` is a live dlopen handle, `cname` a C string.
    let ptr = unsafe { libc::dlsym(lib, cname.as_ptr()) };
    assert!(!ptr.is_null(), "{name} not found in libperfsupport.so");
    assert_eq!(size_of::<T>(), size_of::<*mut c_void>());
    // SAFETY: `T` is the function pointer type of that symbol (perfsupport.h).
    unsafe { std::mem::transmute_copy(&ptr) }
}

/// Best ns per call of `op` over `rounds` rounds of `calls` calls.
fn best_ns(rounds: usize, calls: usize, mut op: impl FnMut()) -> f64 {
    (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                op();
            }
            start.elapsed().as_nanos() as f64 / calls as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    // Cargo's release directory, where it built this bench
    // (`DIR/deps/capi_cost-HASH`), wherever `CARGO_TARGET_DIR` points.
    let exe = std::env::current_exe().expect("the bench's path");
    let release = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("DIR/deps/");
    let lib_path = CString::new(release.join("libperfsupport.so").to_str().unwrap()).unwrap();
    // SAFETY: a C string; the library has no constructors with preconditions.
    let lib = unsafe { libc::dlopen(lib_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(
        !lib.is_null(),
        "build it first: cargo build --release -p perfsupport-capi"
    );
    let write_entry: WriteEntry = symbol(lib, "perfsupport_write_perf_map_entry");
    let open: Open = symbol(lib, "perfsupport_profilers_open");
    let register: Register = symbol(lib, "perfsupport_register");
    let finish: Finish = symbol(lib, "perfsupport_profilers_finish");

    let scratch = std::env::temp_dir().join(format!("capi-bench-{}", std::process::id()));
    let c_dir = scratch.join("c");
    let rust_dir = scratch.join("rust");
    std::fs::create_dir_all(&c_dir).unwrap();
    std::fs::create_dir_all(&rust_dir).unwrap();

    // push rbp; mov rbp, rsp; 24 x nop; pop rbp; ret
    let mut code = vec![0x55, 0x48, 0x89, 0xe5];
    code.extend([0x90; 24]);
    code.extend([0x5d, 0xc3]);
    let name = "bench::function";
    let cname = CString::new(name).unwrap();
    let file = CString::new("bench.mj").unwrap();
    let (rounds, calls) = (7, 20_000);

    // Perf map entry: the CPython-style trio against PerfMap::register.
    let c_map = best_ns(rounds, calls, || {
        // SAFETY: `code` is readable for its length; `cname` a C string.
        let rc = unsafe { write_entry(code.as_ptr().cast(), code.len() as c_uint, cname.as_ptr()) };
        assert_eq!(rc, 0);
    });
    let rust_map_sink = PerfMap::in_dir(&rust_dir);
    let rust_map = best_ns(rounds, calls, || {
        let region = CodeRegion::new(&code, name);
        rust_map_sink.register(&[region]).unwrap();
    });

    // Jitdump region with frame-pointer CFI and three line rows.
    let c_lines: Vec<CLine> = [0u32, 4, 28]
        .iter()
        .zip([1, 2, 3])
        .map(|(&offset, line)| CLine {
            offset,
            file: file.as_ptr(),
            line,
            column: 0,
        })
        .collect();
    let c_unwind = CUnwind {
        kind: 1,
        rows: std::ptr::null(),
        row_count: 0,
    };
    let c_region = CRegion {
        code: code.as_ptr().cast(),
        size: code.len(),
        name: cname.as_ptr(),
        unwind: &c_unwind,
        lines: c_lines.as_ptr(),
        line_count: c_lines.len(),
    };
    let c_dir_c = CString::new(c_dir.to_str().unwrap()).unwrap();
    let mut handle = std::ptr::null_mut();
    // SAFETY: a C string and a writable out-pointer.
    assert_eq!(unsafe { open(2, c_dir_c.as_ptr(), &mut handle) }, 0);
    let c_dump = best_ns(rounds, calls, || {
        // SAFETY: the handle is open; the region's pointers are live.
        assert_eq!(unsafe { register(handle, &c_region, 1) }, 0);
    });
    // SAFETY: the handle is open and not used again.
    assert_eq!(unsafe { finish(handle) }, 0);

    let mut profilers = Profilers::new();
    profilers.add(Box::new(JitDump::create_in(&rust_dir).unwrap()));
    let lines: Vec<LineEntry> = [0u32, 4, 28]
        .iter()
        .zip([1, 2, 3])
        .map(|(&offset, line)| LineEntry {
            offset,
            file: "bench.mj",
            line,
            column: 0,
        })
        .collect();
    let rust_dump = best_ns(rounds, calls, || {
        // Built per call, as the C API builds it per call.
        let cfi = CallFrameInfo::x86_64_frame_pointer(code.len() as u32).unwrap();
        let region = CodeRegion::new(&code, name)
            .with_unwind(&cfi)
            .with_lines(&lines);
        assert!(profilers.register(&[region]).is_empty());
    });
    assert!(profilers.finish().is_empty());

    println!("| operation | C API (ns) | Rust API (ns) | C / Rust |");
    println!("|---|---:|---:|---:|");
    for (what, c, rust) in [
        ("perf map entry", c_map, rust_map),
        ("jitdump region, FP unwind + 3 lines", c_dump, rust_dump),
    ] {
        println!("| {what} | {c:.0} | {rust:.0} | {:.2} |", c / rust);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", std::process::id()));
}
