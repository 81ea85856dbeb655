//! The next code file, created before a batch needs it.
//!
//! Creating a named file is the slowest step of publishing a small batch:
//! the file system allocates an inode and adds a directory entry. On ext4
//! the inode search alone (`find_inode_bit`, `recently_deleted`) took
//! 100-170 us here once many files had been deleted, more than compiling a
//! one-line function. None of it depends on the batch, so a helper thread
//! (`perfsupport-files`) creates the next `code-N.so` (empty, through the
//! safe-file path, mode 0444, open read-write and close-on-exec) while the
//! VM compiles, and [`publish`](super::ElfCodeFiles::publish) only writes,
//! maps and closes it. Each file it makes already holds [`ZERO_PAGES`]
//! pages of zeros, written by the helper: the page cache pages and the
//! file system's block reservations a small batch's file needs exist, and
//! the publisher's `pwrite` over them took 6 us instead of 16 here. A
//! batch whose file is shorter leaves zeros after its section headers
//! (every ELF reader goes by offsets; the file is at most that much
//! longer); a longer one extends the file as usual.
//!
//! The helper keeps up to [`KEEP`] files ready and is
//! woken when half are taken: waking a sleeping thread costs the publisher
//! a system call and the machine an inter-processor interrupt, paid once
//! per `KEEP / 2` batches rather than once per batch.
//!
//! A prepared file nobody takes holds only zeros and is never mapped; they are removed
//! when the [`ElfCodeFiles`](super::ElfCodeFiles) is dropped or
//! [`discard`](Ahead::discard)ed (a VM that ends calls it: the process's
//! files may outlive every VM).
//!
//! After `fork` only the forking thread exists in the child, the helper's
//! lock may be held for ever and the prepared files are the parent's: a
//! process other than the creator (told apart by its pid) never touches
//! either. It creates its files itself ([`Naming::create`] gives them its
//! pid); it still holds the parent's prepared files open (close-on-exec)
//! but never writes or removes them. Two limits, not handled: a child
//! forked into a new pid namespace with its parent's pid would pass for
//! the owner, and a helper that panicked while creating would leave
//! publishers waiting (nothing in that step panics but allocation, which
//! aborts).

use super::FILE_MODE;
use crate::safe_file::{WriteMode, create_replacing_stale};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

/// How many files the helper keeps ready: woken once per `KEEP / 2`
/// batches (here each wake cost the publisher 17-22 us: the futex and
/// the other CPU's interrupt), and as many empty files left behind by a
/// process that exits without [`Ahead::discard`].
const KEEP: usize = 16;

/// Pages of zeros the helper writes into each file it makes: a batch of
/// one small function (the headers' page, a code page, the DWARF and
/// symbols) fits.
const ZERO_PAGES: usize = 3;

/// A new code file (empty, or zeros made ahead), open for writing.
#[derive(Debug)]
pub(super) struct NewFile {
    /// Its number: `code-N.so`.
    pub number: u64,
    pub path: PathBuf,
    pub file: File,
}

/// Names the files of one directory: `code-1.so`, `code-2.so`, ... in the
/// order they are created.
#[derive(Debug)]
pub(super) struct Naming {
    dir: PathBuf,
    next: AtomicU64,
    /// The process that made the directory.
    owner: u32,
}

impl Naming {
    pub fn new(dir: PathBuf) -> Naming {
        Naming {
            dir,
            next: AtomicU64::new(0),
            owner: std::process::id(),
        }
    }

    /// True in the process that made the directory (not a forked child).
    pub fn in_owner(&self) -> bool {
        std::process::id() == self.owner
    }

    /// Creates the next file. A forked child's names carry its pid
    /// (`code-PID-N.so`): its copy of the counter would otherwise give the
    /// parent's next names, and a file of the parent's is never replaced.
    pub fn create(&self) -> io::Result<NewFile> {
        let number = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let name = if self.in_owner() {
            format!("code-{number}.so")
        } else {
            format!("code-{}-{number}.so", std::process::id())
        };
        let path = self.dir.join(name);
        let file = create_replacing_stale(&path, FILE_MODE, WriteMode::ReadWrite)?;
        Ok(NewFile { number, path, file })
    }
}

/// The helper thread and the files it keeps ready.
#[derive(Debug)]
pub(super) struct Ahead {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The files' names, and the process they (and the helper) belong to.
    naming: Arc<Naming>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the helper (a file was taken, or stop) and a publisher
    /// waiting for the file being created.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Files made and not taken, oldest first.
    ready: VecDeque<NewFile>,
    /// The helper is creating a file (the lock is not held meanwhile).
    creating: bool,
    /// The helper should fill `ready` up to [`KEEP`].
    wanted: bool,
    stop: bool,
}

impl Ahead {
    /// Starts the helper, which makes the first files at once. If no
    /// thread can be started, every file is created when it is needed.
    pub fn start(naming: Arc<Naming>, page: usize) -> Ahead {
        let shared = Arc::new(Shared::default());
        shared.state.lock().wanted = true;
        let (helper, helper_naming) = (Arc::clone(&shared), Arc::clone(&naming));
        let thread = std::thread::Builder::new()
            .name("perfsupport-files".into())
            .spawn(move || helper.run(&helper_naming, page))
            .ok();
        Ahead {
            shared,
            thread,
            naming,
        }
    }

    // ANCHOR: take
    /// The oldest prepared file, or the one being prepared once it is
    /// ready; None if there is none (the helper failed, or could not
    /// start), and in a forked child. Wakes the helper when half the files
    /// are taken.
    pub fn take(&self) -> Option<NewFile> {
        if self.thread.is_none() || !self.in_owner() {
            return None;
        }
        let mut state = self.shared.state.lock();
        // Waiting for the helper costs about what making a file here
        // would (it started first), and keeps the files in order.
        while state.ready.is_empty() && (state.creating || state.wanted) {
            self.shared.changed.wait(&mut state);
        }
        let file = state.ready.pop_front();
        if state.ready.len() <= KEEP / 2 && !state.wanted {
            state.wanted = true;
            self.shared.changed.notify_all();
        }
        file
    }
    // ANCHOR_END: take

    /// Removes the prepared files, if any; the helper makes no others
    /// until the next [`take`](Self::take). For a VM that ends while the
    /// process goes on (or exits without dropping the files).
    pub fn discard(&self) {
        if self.thread.is_none() || !self.in_owner() {
            return;
        }
        let mut state = self.shared.state.lock();
        state.wanted = false;
        while state.creating {
            self.shared.changed.wait(&mut state);
        }
        state.ready.drain(..).for_each(remove);
    }

    /// True in the process that started the helper (not a forked child).
    fn in_owner(&self) -> bool {
        self.naming.in_owner()
    }

    /// A new file made here and now (the helper had none, or this is a
    /// forked child).
    pub fn create(&self) -> io::Result<NewFile> {
        self.naming.create()
    }

    /// The directory the files go to.
    pub fn dir(&self) -> &Path {
        &self.naming.dir
    }
}

impl Shared {
    /// The helper's loop: while wanted, make files until [`KEEP`] are
    /// ready; then sleep until woken; until stopped.
    fn run(&self, naming: &Naming, page: usize) {
        let zeros = vec![0u8; ZERO_PAGES * page];
        let mut state = self.state.lock();
        while !state.stop {
            if state.wanted && state.ready.len() < KEEP {
                state.creating = true;
                let made = parking_lot::MutexGuard::unlocked(&mut state, || {
                    let new = naming.create()?;
                    match new.file.write_all_at(&zeros, 0) {
                        Ok(()) => Ok(new),
                        Err(e) => {
                            remove(new);
                            Err(e)
                        }
                    }
                });
                state.creating = false;
                match made {
                    Ok(file) => state.ready.push_back(file),
                    // A full disk, say: the publisher creates its file
                    // itself and reports what it sees; a later take asks
                    // again.
                    Err(_) => state.wanted = false,
                }
                self.changed.notify_all();
            } else {
                state.wanted &= state.ready.len() < KEEP;
                self.changed.wait(&mut state);
            }
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if !self.in_owner() {
            // A forked child: no helper runs here, its lock may be held
            // for ever, the prepared file is the parent's. Touch nothing.
            std::mem::forget(thread);
            return;
        }
        self.shared.state.lock().stop = true;
        self.shared.changed.notify_all();
        let _ = thread.join();
        self.shared.state.lock().ready.drain(..).for_each(remove);
    }
}

/// Removes an unused prepared file.
fn remove(file: NewFile) {
    drop(file.file);
    let _ = std::fs::remove_file(&file.path);
}
