use super::image;
use crate::region::CodeRegion;
use crate::unwind::CallFrameInfo;
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
use object::Endianness;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{Object, ObjectSection, ObjectSymbol};

/// `push rbp; mov rbp, rsp; mov eax, 42; pop rbp; ret`: returns 42.
#[cfg(target_arch = "x86_64")]
const FORTY_TWO: [u8; 11] = [0x55, 0x48, 0x89, 0xe5, 0xb8, 0x2a, 0, 0, 0, 0x5d, 0xc3];
/// `stp x29, x30, [sp, #-16]!; mov x29, sp; mov w0, #42;
/// ldp x29, x30, [sp], #16; ret`: returns 42.
#[cfg(target_arch = "aarch64")]
const FORTY_TWO: [u8; 20] = [
    0xfd, 0x7b, 0xbf, 0xa9, 0xfd, 0x03, 0x00, 0x91, 0x40, 0x05, 0x80, 0x52, 0xfd, 0x7b, 0xc1, 0xa8,
    0xc0, 0x03, 0x5f, 0xd6,
];
/// Its length.
const LEN: usize = FORTY_TWO.len();

/// The host's frame-pointer CFI for FORTY_TWO.
fn forty_two_cfi() -> CallFrameInfo {
    CallFrameInfo::host_frame_pointer(LEN as u32).expect("cfi")
}

/// A chunk of two pages: the first left for the headers, then two
/// functions (at +4096 and +4128) with unwind info, as the writer sees it.
fn page_with_two() -> (Vec<u8>, CallFrameInfo, CallFrameInfo) {
    let mut code = vec![0xccu8; 8192];
    code[..4096].fill(0);
    code[4096..4096 + LEN].copy_from_slice(&FORTY_TWO);
    code[4128..4128 + LEN].copy_from_slice(&FORTY_TWO);
    (code, forty_two_cfi(), forty_two_cfi())
}

fn regions<'a>(code: &'a [u8], a: &'a CallFrameInfo, b: &'a CallFrameInfo) -> Vec<CodeRegion<'a>> {
    vec![
        CodeRegion::new(&code[4096..4096 + LEN], "toy:jit:one:t.toy:1")
            .with_unwind(a.unwind_info()),
        CodeRegion::new(&code[4128..4128 + LEN], "toy:jit:two:t.toy:2")
            .with_unwind(b.unwind_info()),
    ]
}

#[test]
fn the_file_maps_its_code_at_the_page_and_describes_every_region() {
    let (code, a, b) = page_with_two();
    let chunk = code.as_ptr() as u64;
    let regions = regions(&code, &a, &b);
    let bytes = image::build(4096, chunk, &code, &regions, "/src", b"one").expect("image");
    let file = ElfFile64::<Endianness>::parse(&*bytes).expect("a valid ELF");
    let header = file.elf_header();
    assert_eq!(header.e_type(Endianness::Little), object::elf::ET_DYN);
    // One PT_LOAD, the whole chunk from offset and address 0, read+execute.
    let loads: Vec<_> = (file.elf_program_headers().iter())
        .filter(|p| p.p_type(Endianness::Little) == object::elf::PT_LOAD)
        .collect();
    assert_eq!(loads.len(), 1);
    let text = loads[0];
    assert_eq!(text.p_offset(Endianness::Little), 0);
    assert_eq!(text.p_vaddr(Endianness::Little), 0);
    assert_eq!(text.p_filesz(Endianness::Little), 8192);
    assert_eq!(
        text.p_flags(Endianness::Little),
        object::elf::PF_R | object::elf::PF_X
    );
    assert_eq!(
        &bytes[4096..4096 + 32 + LEN],
        &code[4096..4096 + 32 + LEN],
        "the code, as it runs"
    );
    assert!(bytes.len() as u64 > 8192, "symbols after the segment");
    assert!(
        (file.elf_program_headers().iter())
            .any(|p| p.p_type(Endianness::Little) == object::elf::PT_GNU_EH_FRAME)
    );
    // One symbol per region, at its ELF address.
    let symbols: Vec<_> = file
        .symbols()
        .map(|s| (s.name().expect("name").to_owned(), s.address(), s.size()))
        .collect();
    assert_eq!(
        symbols,
        [
            ("toy:jit:one:t.toy:1".to_owned(), 4096, LEN as u64),
            ("toy:jit:two:t.toy:2".to_owned(), 4096 + 32, LEN as u64)
        ]
    );
    // .eh_frame_hdr finds an FDE covering every byte of each region.
    let section = |name: &str| {
        let s = file.section_by_name(name).expect(name);
        (s.address(), s.data().expect("data").to_vec())
    };
    let (hdr_at, hdr) = section(".eh_frame_hdr");
    let (eh_at, eh) = section(".eh_frame");
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_at)
        .set_eh_frame(eh_at);
    let hdr = EhFrameHdr::new(&hdr, LittleEndian)
        .parse(&bases, 8)
        .expect("hdr");
    let table = hdr.table().expect("a search table");
    let eh_frame = EhFrame::new(&eh, LittleEndian);
    for (start, name) in [(4096u64, "one"), (4096 + 32, "two")] {
        for pc in start..start + LEN as u64 {
            let fde = table
                .fde_for_address(&eh_frame, &bases, pc, EhFrame::cie_from_offset)
                .unwrap_or_else(|e| panic!("{name}: no FDE for {pc:#x}: {e}"));
            assert_eq!(
                (fde.initial_address(), fde.len()),
                (start, LEN as u64),
                "{name}"
            );
        }
    }
    assert!(
        table
            .fde_for_address(&eh_frame, &bases, 4096 + 20, EhFrame::cie_from_offset)
            .is_err()
    );
    // A GNU build-id of 20 bytes, different for the same code published
    // again (another salt).
    let id = file.build_id().expect("read").expect("a build-id").to_vec();
    assert_eq!(id.len(), 20);
    let again = image::build(4096, chunk, &code, &regions, "/src", b"two").expect("image");
    let other = ElfFile64::<Endianness>::parse(&*again).expect("ELF");
    assert_ne!(other.build_id().expect("read").expect("id"), &id[..]);
    assert_eq!(bytes.len(), again.len());
}

#[test]
fn a_region_outside_its_chunk_is_refused() {
    let (code, a, b) = page_with_two();
    // The regions borrow their code from another copy of the chunk.
    let (other, ..) = page_with_two();
    let regions = regions(&other, &a, &b);
    let chunk = code.as_ptr() as u64;
    let err = image::build(4096, chunk, &code, &regions, "/src", b"").expect_err("refused");
    assert!(err.to_string().contains("outside its chunk"), "{err}");
    // In the chunk's first page (the headers') too.
    let early = [CodeRegion::new(
        &code[16..16 + LEN],
        "toy:jit:early:t.toy:1",
    )];
    let err = image::build(4096, chunk, &code, &early, "/src", b"").expect_err("refused");
    assert!(err.to_string().contains("outside its chunk"), "{err}");
}

#[test]
fn a_page_size_the_headers_do_not_fit_is_refused() {
    let (code, a, b) = page_with_two();
    let regions = regions(&code, &a, &b);
    let chunk = code.as_ptr() as u64;
    for page in [0, 64, 3000, 6144, 16384] {
        let err = image::build(page, chunk, &code, &regions, "/src", b"")
            .expect_err("a bad page size is refused");
        assert!(err.to_string().contains("whole pages"), "{page}: {err}");
    }
}

/// A fresh private anonymous mapping of `len` bytes with protection `prot`,
/// owned by the calling test.
#[cfg(target_arch = "x86_64")]
fn anonymous(len: usize, prot: libc::c_int) -> *mut libc::c_void {
    // SAFETY: a new mapping at an address of the kernel's choosing touches
    // no existing memory.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED);
    at
}

#[cfg(target_arch = "x86_64")]
#[test]
fn published_code_runs_from_its_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let files = super::ElfCodeFiles::create(dir.path(), "toyvm").expect("files");
    let page = files.page_size() as usize;
    let chunk = anonymous(2 * page, libc::PROT_READ | libc::PROT_WRITE);
    let start = chunk as usize;
    // SAFETY: the pages just mapped read-write.
    let code = unsafe { std::slice::from_raw_parts_mut(chunk.cast::<u8>(), 2 * page) };
    code[page..page + LEN].copy_from_slice(&FORTY_TWO);
    let cfi = forty_two_cfi();
    let region = CodeRegion::new(&code[page..page + LEN], "toy:jit:answer:t.toy:1")
        .with_unwind(cfi.unwind_info());
    // SAFETY: the pages are ours and nothing writes them from here on.
    let path = unsafe { files.publish(start, 2 * page, &[region]) }.expect("published");
    // The page is now the file's code, read+execute, file-backed.
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let line = maps
        .lines()
        .find(|l| l.starts_with(&format!("{start:x}-")))
        .expect("the chunk's mapping");
    assert!(
        line.contains(" r-xp ") && line.ends_with(path.to_str().expect("utf-8")),
        "{line}"
    );
    assert_eq!(
        std::fs::metadata(&path).expect("file").permissions().mode() & 0o777,
        0o444
    );
    // SAFETY: the second page holds FORTY_TWO at its start, executable now.
    let answer: extern "C" fn() -> i32 = unsafe { std::mem::transmute(start + page) };
    assert_eq!(answer(), 42);
    // The next batch goes into a new file.
    assert!(path.ends_with("code-1.so"), "{}", path.display());
    // binutils reads it without a complaint, CFI included.
    if let Ok(out) = std::process::Command::new("readelf")
        .args(["-lSsW", "--debug-dump=frames"])
        .arg(&path)
        .output()
    {
        let (text, errors) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success() && errors.is_empty(), "{errors}");
        for want in [
            "GNU_EH_FRAME",
            "toy:jit:answer:t.toy:1",
            "DW_CFA_def_cfa_register: r6 (rbp)",
        ] {
            assert!(text.contains(want), "{want} in:\n{text}");
        }
        eprintln!("{text}");
    }
    // SAFETY: the mapping made above, not used any more.
    unsafe { libc::munmap(chunk, 2 * page) };
}

/// A batch staged in ordinary memory is published over pages that were
/// never readable, writable or touched, and runs from its file there.
#[cfg(target_arch = "x86_64")]
#[test]
fn staged_code_runs_from_its_file_over_untouched_pages() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = super::ElfCodeFiles::create(dir.path(), "toyvm").expect("files");
    let page = files.page_size() as usize;
    let chunk = anonymous(2 * page, libc::PROT_NONE);
    let start = chunk as usize;
    let mut staged = vec![0u8; 2 * page];
    staged[page..page + LEN].copy_from_slice(&FORTY_TWO);
    let cfi = forty_two_cfi();
    let region = CodeRegion::new(&staged[page..page + LEN], "toy:jit:staged:t.toy:1")
        .with_unwind(cfi.unwind_info());
    // SAFETY: the reservation is ours, holds nothing and runs nothing;
    // `staged` is a separate allocation.
    let path = unsafe { files.publish_staged(start, &staged, &[region]) }.expect("published");
    let line = mapping_at(start).expect("the chunk's mapping");
    assert!(
        line.contains(" r-xp ") && line.ends_with(path.to_str().expect("utf-8")),
        "{line}"
    );
    // The file's symbol and FDE name the code where it runs, not where it
    // was staged: the symbol at the page, the FDE's address at the page.
    let bytes = std::fs::read(&path).expect("file");
    let file = ElfFile64::<Endianness>::parse(&*bytes).expect("a valid ELF");
    let symbol = (file.symbols())
        .find(|s| s.name() == Ok("toy:jit:staged:t.toy:1"))
        .expect("the symbol");
    assert_eq!(symbol.address(), page as u64);
    // SAFETY: the second page holds FORTY_TWO at its start, executable now.
    let answer: extern "C" fn() -> i32 = unsafe { std::mem::transmute(start + page) };
    assert_eq!(answer(), 42);
    // A chunk that is not page-aligned is refused and left alone.
    // SAFETY: as above; the call fails before it maps anything.
    let err = unsafe { files.publish_staged(start + 16, &staged, &[]) }.expect_err("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    // SAFETY: the mapping made above, not used any more.
    unsafe { libc::munmap(chunk, 2 * page) };
}

#[test]
fn a_noexec_directory_is_reported_at_creation() {
    // /dev/shm is mounted noexec on most systems; where it is not, the
    // creation succeeds and there is nothing to check.
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in(shm).expect("temp dir in /dev/shm");
    match super::ElfCodeFiles::create(dir.path(), "toyvm") {
        Ok(files) => assert!(files.dir().starts_with(dir.path())),
        Err(e) => assert!(
            e.to_string().contains(&dir.path().display().to_string()),
            "{e}"
        ),
    }
}

/// The mapping of `/proc/self/maps` that starts at `start`, if any.
fn mapping_at(start: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    maps.lines()
        .find(|l| l.starts_with(&format!("{start:x}-")))
        .map(str::to_owned)
}

#[test]
fn a_chunk_is_written_published_run_and_unmapped() {
    use super::{ChunkRegion, ElfCodeFiles};
    let dir = tempfile::tempdir().expect("temp dir");
    let files = ElfCodeFiles::create(dir.path(), "chunk").expect("files");
    let mut chunk = files.allocate(64, 2).expect("a chunk");
    assert_eq!(chunk.capacity(), 64);
    chunk.write(0, &FORTY_TWO).expect("fits");
    chunk.write(32, &FORTY_TWO).expect("fits");
    // Outside the code bytes: refused, nothing written.
    assert!(chunk.write(60, &FORTY_TWO).is_err());
    assert!(chunk.write(usize::MAX, &[0]).is_err());
    let cfi = forty_two_cfi();
    let lines = [crate::LineEntry {
        offset: 4,
        file: "t.toy",
        line: 7,
        column: 0,
    }];
    // A region past the code bytes, or two that overlap: refused, and the
    // chunk stays writable.
    let outside = ChunkRegion::new(60, LEN, "chunk:outside");
    assert!(chunk.publish(&files, &[outside]).is_err());
    let overlapping = [
        ChunkRegion::new(0, LEN, "chunk:one"),
        ChunkRegion::new(8, LEN, "chunk:two"),
    ];
    assert!(chunk.publish(&files, &overlapping).is_err());
    assert!(chunk.file().is_none());
    let regions = [
        ChunkRegion::new(0, LEN, "chunk:one")
            .with_unwind(cfi.unwind_info())
            .with_lines(&lines),
        ChunkRegion::new(32, LEN, "chunk:two").with_unwind(cfi.unwind_info()),
    ];
    let path = chunk.publish(&files, &regions).expect("published");
    assert_eq!(chunk.file(), Some(path.as_path()));
    let start = chunk.code_address() - files.page_size() as usize;
    let line = mapping_at(start).expect("the chunk's mapping");
    assert!(
        line.contains(" r-xp ") && line.ends_with(path.to_str().expect("utf-8")),
        "{line}"
    );
    type Answer = extern "C" fn() -> i32;
    // SAFETY: both regions hold FORTY_TWO, executable now.
    let (one, two) = unsafe {
        (
            std::mem::transmute::<usize, Answer>(chunk.code_address()),
            std::mem::transmute::<usize, Answer>(chunk.code_address() + 32),
        )
    };
    assert_eq!((one(), two()), (42, 42));
    // Published code is final.
    assert!(chunk.write(0, &[0xc3]).is_err());
    assert!(chunk.publish(&files, &regions).is_err());
    let bytes = std::fs::read(&path).expect("the file");
    let elf = ElfFile64::<Endianness>::parse(&*bytes).expect("a valid ELF");
    let names: Vec<_> = elf.symbols().filter_map(|s| s.name().ok()).collect();
    assert_eq!(names, ["chunk:one", "chunk:two"]);
    // chunk:one's line table at its ELF address (the page, then offset 4).
    let file = object::File::parse(&*bytes).expect("ELF");
    let page = files.page_size();
    assert_eq!(
        crate::dwarf::line_rows(&file),
        [(page + 4, "t.toy".to_owned(), 7)]
    );
    drop(chunk);
    // Another test's chunk may take the addresses at once: what counts is
    // that this file is mapped there no more.
    let after = mapping_at(start);
    assert!(
        after
            .as_ref()
            .is_none_or(|l| !l.ends_with(path.to_str().expect("utf-8"))),
        "dropped: unmapped, but {after:?}"
    );
}

/// A batch of no functions is a file of headers and empty tables, mapped
/// like any other (the C API fuzzer found it panicking: its tables were
/// placed in the headers' page).
#[test]
fn a_chunk_with_no_regions_publishes_a_file_of_no_symbols() {
    use super::ElfCodeFiles;
    let dir = tempfile::tempdir().expect("temp dir");
    let files = ElfCodeFiles::create(dir.path(), "empty").expect("files");
    let mut chunk = files.allocate(142, 255).expect("a chunk");
    let path = chunk.publish(&files, &[]).expect("published");
    let bytes = std::fs::read(&path).expect("the file");
    let elf = ElfFile64::<Endianness>::parse(&*bytes).expect("a valid ELF");
    assert_eq!(elf.symbols().count(), 0);
    let hdr = elf.section_by_name(".eh_frame_hdr").expect(".eh_frame_hdr");
    let start = chunk.code_address() - files.page_size() as usize;
    let line = mapping_at(start).expect("the chunk's mapping");
    assert!(line.contains(" r-xp "), "{line}");
    assert!(
        hdr.address() >= files.page_size(),
        "tables after the headers' page"
    );
}

/// The directory's file names, sorted, split into code files and files
/// made ahead (zeros only).
fn listing(dir: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let mut names: Vec<(String, bool)> = std::fs::read_dir(dir)
        .expect("the directory")
        .map(|e| {
            let path = e.expect("entry").path();
            let zeros = (std::fs::read(&path).expect("a file").iter()).all(|&b| b == 0);
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, zeros)
        })
        .collect();
    names.sort();
    let (prepared, code): (Vec<_>, Vec<_>) = names.into_iter().partition(|(_, zeros)| *zeros);
    (
        code.into_iter().map(|(n, _)| n).collect(),
        prepared.into_iter().map(|(n, _)| n).collect(),
    )
}

/// Publishes one FORTY_TWO function in a chunk of its own; the chunk
/// (its code runs from `path`).
fn publish_one(files: &super::ElfCodeFiles) -> super::CodeChunk {
    let mut chunk = files.allocate(LEN, 1).expect("a chunk");
    chunk.write(0, &FORTY_TWO).expect("fits");
    let cfi = forty_two_cfi();
    let region = super::ChunkRegion::new(0, LEN, "ahead:one").with_unwind(cfi.unwind_info());
    chunk.publish(files, &[region]).expect("published");
    chunk
}

#[test]
fn files_made_ahead_are_taken_in_order_and_removed_when_unused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = super::ElfCodeFiles::create(dir.path(), "ahead").expect("files");
    let chunks: Vec<_> = (0..3).map(|_| publish_one(&files)).collect();
    let names: Vec<_> = (chunks.iter())
        .map(|c| {
            c.file()
                .expect("published")
                .file_name()
                .expect("name")
                .to_owned()
        })
        .collect();
    assert_eq!(names, ["code-1.so", "code-2.so", "code-3.so"]);
    for chunk in &chunks {
        // SAFETY: FORTY_TWO at the chunk's code address, executable.
        let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(chunk.code_address()) };
        assert_eq!(f(), 42);
        // Zeros the helper wrote beyond the image stay zeros; the image
        // is intact.
        let bytes = std::fs::read(chunk.file().expect("file")).expect("read");
        ElfFile64::<Endianness>::parse(&*bytes).expect("a valid ELF");
    }
    let (code, prepared) = listing(files.dir());
    assert_eq!(code, ["code-1.so", "code-2.so", "code-3.so"]);
    assert!(prepared.len() <= 16, "{prepared:?}");
    // Discarded: only code files remain, and publishing goes on.
    files.discard_prepared();
    let (_, prepared) = listing(files.dir());
    assert_eq!(prepared, Vec::<String>::new());
    let fourth = publish_one(&files);
    assert!(fourth.file().expect("published").starts_with(files.dir()));
    let (code, _) = listing(files.dir());
    assert_eq!(code.len(), 4, "{code:?}");
    // Dropped: the files made ahead go, the code files stay.
    let dir_path = files.dir().to_owned();
    drop(files);
    let (code, prepared) = listing(&dir_path);
    assert_eq!(
        (code.len(), prepared.len()),
        (4, 0),
        "{code:?} {prepared:?}"
    );
}

/// A forked child neither waits for the parent's helper nor writes the
/// parent's files made ahead: its files carry its pid.
#[test]
fn a_forked_child_publishes_files_of_its_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = super::ElfCodeFiles::create(dir.path(), "fork").expect("files");
    let first = publish_one(&files);
    let before = listing(files.dir());
    // SAFETY: the child only publishes (allocation, file creation and
    // mapping, which glibc's fork handlers keep usable) and leaves with
    // `_exit`, running no destructor of the parent's.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let chunk = publish_one(&files);
        let name = chunk
            .file()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        let own = format!("code-{}-", std::process::id());
        let ok = name.is_some_and(|n| n.starts_with(&own));
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child: {status}"
    );
    // The parent's files are as they were, and one more code file is the
    // child's.
    let (code, prepared) = listing(files.dir());
    // (the helper may have made more meanwhile)
    assert!(
        before.1.iter().all(|f| prepared.contains(f)),
        "the parent's files made ahead: {:?} then {prepared:?}",
        before.1
    );
    assert_eq!(code.len(), before.0.len() + 1, "{code:?}");
    assert!(
        code.iter().any(|n| n.starts_with(&format!("code-{pid}-"))),
        "{code:?}"
    );
    let second = publish_one(&files);
    assert!(second.file().is_some());
    drop((first, second));
}
