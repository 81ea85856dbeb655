//! samply on a `--jit-elf` recording: `samply import` of a `perf record
//! --call-graph dwarf` recording, with no perf map and no jitdump, gives
//! whole stacks whose JIT frames samply's own symbol server names from the
//! code files.
//!
//! `samply import --save-only` writes a Firefox Profiler profile whose
//! native frames are addresses in libraries (`code-N.so` for toyvm's code,
//! each with its build-id); the profiler front-end names them by asking
//! the symbol server that `samply load` starts (`POST .../symbolicate/v5`).
//! This test asks the same server, for every frame of every sample in a
//! code file, and walks the named stacks: most samples must have compiled
//! `inner_hot` as their leaf, and 90% of those `middle`, `outer` and
//! `<main>` below it.
//!
//! Skipped loudly without perf or samply, except under `CI=true`.

mod common;

use common::PerfWork;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};

const TEST: &str = "jit_elf_samply";

/// One frame of a sample: the library it is in (an index into the
/// profile's `libs`) and its offset there, or `None` for a frame samply
/// did not place in a library.
type Frame = Option<(usize, u64)>;

/// Every sample's stack, leaf first, of every thread.
fn sample_frames(profile: &Value) -> Vec<Vec<Frame>> {
    let mut stacks = Vec::new();
    for thread in profile["threads"].as_array().expect("threads") {
        let prefix = thread["stackTable"]["prefix"].as_array().expect("prefix");
        let frame = thread["stackTable"]["frame"].as_array().expect("frame");
        let address = thread["frameTable"]["address"].as_array().expect("address");
        let func = thread["frameTable"]["func"].as_array().expect("func");
        let resource = thread["funcTable"]["resource"]
            .as_array()
            .expect("resource");
        let lib = thread["resourceTable"]["lib"].as_array().expect("lib");
        for sample in thread["samples"]["stack"].as_array().expect("samples") {
            let mut frames = Vec::new();
            let mut stack = sample.as_u64();
            while let Some(s) = stack {
                let f = frame[s as usize].as_u64().expect("frame index") as usize;
                let fun = func[f].as_u64().expect("func index") as usize;
                let placed = (resource[fun].as_i64())
                    .filter(|&r| r >= 0)
                    .and_then(|r| lib[r as usize].as_u64())
                    .zip(address[f].as_i64().filter(|&a| a >= 0));
                frames.push(placed.map(|(l, a)| (l as usize, a as u64)));
                stack = prefix[s as usize].as_u64();
            }
            stacks.push(frames);
        }
    }
    stacks
}

/// `samply load` of a saved profile, serving symbols until dropped.
struct SymbolServer {
    child: Child,
    /// `http://127.0.0.1:PORT/TOKEN`, from the URL samply prints.
    url: String,
}

impl SymbolServer {
    fn start(work: &PerfWork, profile: &str) -> SymbolServer {
        // A port free a moment ago: samply needs a number.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
            .to_string();
        let mut child = work
            .command("samply")
            .args(["load", "--no-open", "-P", &port, profile])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("samply load");
        // It prints the profiler's URL, whose `symbolServer=` parameter is
        // the server's address, percent-encoded.
        let mut url = None;
        for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
            let line = line.expect("samply's output");
            if let Some((_, encoded)) = line.split_once("symbolServer=") {
                url = Some(percent_decode(
                    encoded.split_whitespace().next().unwrap_or(""),
                ));
                break;
            }
        }
        let Some(url) = url else {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
            panic!("samply load printed no symbol server: {err}");
        };
        SymbolServer { child, url }
    }

    /// The function names of `offsets` in the library `(debug name,
    /// breakpad id)`, through the symbolication API the Firefox Profiler
    /// uses; `None` where the server has no name.
    fn names(&self, lib: (&str, &str), offsets: &[u64]) -> Vec<Option<String>> {
        let body = json!({
            "jobs": [{
                "memoryMap": [[lib.0, lib.1]],
                "stacks": [offsets.iter().map(|&o| json!([0, o])).collect::<Vec<_>>()],
            }]
        })
        .to_string();
        let rest = self.url.strip_prefix("http://").expect("an http URL");
        let (host, path) = rest.split_once('/').expect("a token path");
        let mut stream = TcpStream::connect(host).expect("connect to samply");
        write!(
            stream,
            "POST /{path}/symbolicate/v5 HTTP/1.1\r\nHost: {host}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("send the request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("the response");
        let (head, json) = response.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(head.starts_with("HTTP/1.1 200"), "samply answered {head}");
        let reply: Value = serde_json::from_str(json).expect("JSON");
        let frames = reply["results"][0]["stacks"][0]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(frames.len(), offsets.len(), "one answer per frame: {reply}");
        (frames.iter())
            .map(|f| f["function"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for SymbolServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).expect("a UTF-8 URL")
}

#[test]
fn samply_names_whole_stacks_from_the_code_files() {
    if !common::tool_or_skip(TEST, "perf", common::PERF_RECORD_PROBE)
        || !common::tool_or_skip(TEST, "samply", &["--version"])
    {
        return;
    }
    let work = PerfWork::new("jit-elf-samply");
    let script = common::repo_root().join("examples/scripts/profile_demo.toy");
    work.run_ok(
        "perf",
        &[
            "record",
            "-q",
            "--call-graph",
            "dwarf",
            "-e",
            "cpu-clock",
            "-F",
            "999",
            "-o",
            "perf.data",
            "--",
            env!("CARGO_BIN_EXE_toyvm"),
            "run",
            "--jit-elf",
            "--perf-dir",
            ".",
            script.to_str().expect("a UTF-8 path"),
            "300",
            "100000",
        ],
    );
    let listing: Vec<_> = std::fs::read_dir(&work.dir)
        .expect("the work dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !listing.iter().any(|f| f.starts_with("jit-")),
        "no jitdump: {listing:?}"
    );
    work.run_ok(
        "samply",
        &["import", "--save-only", "-o", "profile.json", "perf.data"],
    );
    let text = std::fs::read_to_string(work.path("profile.json")).expect("profile.json");
    let profile: Value = serde_json::from_str(&text).expect("profile JSON");
    let libs = profile["libs"].as_array().expect("libs");
    let code_files: Vec<usize> = (0..libs.len())
        .filter(|&i| {
            let path = libs[i]["path"].as_str().unwrap_or("");
            path.contains("/toyvm-") && path.ends_with(".so")
        })
        .collect();
    assert!(!code_files.is_empty(), "no code file among {libs:#?}");
    let stacks = sample_frames(&profile);

    // Ask the server for every frame's name, one request per code file.
    let server = SymbolServer::start(&work, "profile.json");
    let mut names: HashMap<(usize, u64), String> = HashMap::new();
    for &lib in &code_files {
        let mut offsets: Vec<u64> = (stacks.iter().flatten().flatten())
            .filter(|(l, _)| *l == lib)
            .map(|&(_, o)| o)
            .collect();
        offsets.sort_unstable();
        offsets.dedup();
        let id = (
            libs[lib]["debugName"].as_str().expect("debugName"),
            libs[lib]["breakpadId"].as_str().expect("breakpadId"),
        );
        for (offset, name) in offsets.iter().zip(server.names(id, &offsets)) {
            let name = name.unwrap_or_else(|| panic!("no name for {id:?} + {offset:#x}"));
            names.insert((lib, *offset), name);
        }
    }
    drop(server);

    // The code files' frames of each sample, named, leaf first.
    let named: Vec<Vec<&str>> = (stacks.iter())
        .map(|frames| {
            (frames.iter().flatten())
                .filter_map(|key| names.get(key).map(String::as_str))
                .collect()
        })
        .collect();
    let hot: Vec<&Vec<&str>> = (named.iter())
        .zip(&stacks)
        .filter(|(n, frames)| {
            // The leaf itself is in a code file and is inner_hot.
            frames
                .first()
                .is_some_and(|f| f.is_some_and(|(l, _)| code_files.contains(&l)))
                && n.first()
                    .is_some_and(|f| f.starts_with("toy:jit") && f.contains(":inner_hot:"))
        })
        .map(|(n, _)| n)
        .collect();
    assert!(
        hot.len() * 2 > stacks.len(),
        "{} of {} samples have compiled inner_hot as their leaf",
        hot.len(),
        stacks.len()
    );
    let whole = (hot.iter())
        .filter(|s| {
            let has = |f: &str| s.iter().any(|frame| frame.contains(f));
            has(":middle:") && has(":outer:") && has(":<main>:")
        })
        .count();
    eprintln!(
        "{TEST}: {whole} of {} inner_hot samples have middle, outer and <main> below",
        hot.len()
    );
    assert!(
        whole * 10 >= hot.len() * 9,
        "{whole} of {} whole; first: {:#?}",
        hot.len(),
        &hot[..hot.len().min(3)]
    );
}
