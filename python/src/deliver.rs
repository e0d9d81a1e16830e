//! How the asyncio API's results reach the event loop, in batches.
//!
//! Each network call of the asyncio API is a task on the tokio runtime
//! whose result must be set on an `asyncio.Future` by the thread that runs
//! the loop. pyo3-async-runtimes did that with one cross-thread wake-up per
//! result: the runtime thread took the GIL (three times per call) and called
//! `call_soon_threadsafe` (a self-pipe write), so every completion fought the
//! loop's thread for the GIL. Here a finished task pushes its result onto a
//! queue shared with the loop, without the GIL; only the push that finds the
//! queue empty wakes the loop: one datagram on a socket pair the loop watches
//! with `add_reader` (on a loop without `add_reader`, one
//! `call_soon_threadsafe`, with the GIL). The loop then drains the whole
//! queue, setting each future's result in the order the tasks finished and
//! skipping futures cancelled meanwhile, so under load one wake-up serves
//! many operations and the runtime threads never wait for the GIL.
//!
//! Cancellation: an operation started with [`OnCancel::Abort`] is aborted
//! (its Rust future dropped) when its awaitable is cancelled, which is what
//! makes the client stop retrying and undo a grant; one started with
//! [`OnCancel::Finish`] runs to its end anyway (a release), as if shielded.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyWeakrefMethods, PyWeakrefReference};

/// Turns a finished task's result into the future's value or exception; run
/// with the GIL on the loop's thread.
type Outcome = Box<dyn FnOnce(Python<'_>) -> PyResult<PyObject> + Send>;

struct Completion {
    future: PyObject,
    outcome: Outcome,
}

/// The finished operations of one event loop, not yet delivered.
struct Queue {
    done: Mutex<Vec<Completion>>,
    wake: Wake,
}

enum Wake {
    /// The write end of the socket pair the loop reads (`add_reader`).
    #[cfg(unix)]
    Socket(std::os::unix::net::UnixDatagram),
    /// The loop (a weak reference), for `call_soon_threadsafe` (loops
    /// without `add_reader`).
    CallSoon(Py<PyWeakrefReference>),
}

impl Queue {
    fn push(self: &Arc<Self>, completion: Completion) {
        let was_empty = {
            let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
            let was_empty = done.is_empty();
            done.push(completion);
            was_empty
        };
        // A non-empty queue has a wake-up on its way already: the one of the
        // push that found it empty, which the drain consumes before it takes
        // the queue.
        if was_empty {
            self.wake();
        }
    }

    fn wake(self: &Arc<Self>) {
        match &self.wake {
            // Never blocks (non-blocking socket); a full buffer means
            // wake-ups are already waiting, and a closed loop reads nothing.
            #[cfg(unix)]
            Wake::Socket(socket) => {
                let _ = socket.send(&[1]);
            }
            Wake::CallSoon(event_loop) => Python::with_gil(|py| {
                let drainer = Drainer {
                    queue: Arc::clone(self),
                    #[cfg(unix)]
                    reader: None,
                };
                // A closed loop refuses (RuntimeError), a collected one is
                // gone: nothing to deliver to.
                if let Some(event_loop) = event_loop.bind(py).upgrade() {
                    let _ =
                        event_loop.call_method1(intern!(py, "call_soon_threadsafe"), (drainer,));
                }
            }),
        }
    }
}

/// The loop's callback: delivers every queued result.
#[pyclass(module = "redislock_native", frozen)]
struct Drainer {
    queue: Arc<Queue>,
    /// The read end of the socket pair (with `add_reader`).
    #[cfg(unix)]
    reader: Option<std::os::unix::net::UnixDatagram>,
}

#[pymethods]
impl Drainer {
    fn __call__(&self, py: Python<'_>) {
        // Consume the wake-ups first: a push after this point finds the
        // queue empty or sees it taken below, and then sends a new one.
        #[cfg(unix)]
        if let Some(reader) = &self.reader {
            let mut buf = [0u8; 64];
            while reader.recv(&mut buf).is_ok() {}
        }
        let batch = std::mem::take(
            &mut *self
                .queue
                .done
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for Completion { future, outcome } in batch {
            let future = future.bind(py);
            // A future cancelled meanwhile refuses (InvalidStateError): its
            // awaiting task has moved on, and the result is dropped.
            let _ = match outcome(py) {
                Ok(value) => future.call_method1(intern!(py, "set_result"), (value,)),
                Err(error) => {
                    future.call_method1(intern!(py, "set_exception"), (error.into_value(py),))
                }
            };
        }
    }
}

/// One event loop's end of the delivery, kept while the loop is open (a
/// closed loop drops its readers: the drainer and the read end with them).
/// The loop is referred to weakly: a loop its program dropped without
/// closing it must still be collected (its `__del__` closes it), not kept
/// open here with its file descriptors for the life of the process.
struct Channel {
    event_loop: Py<PyWeakrefReference>,
    queue: Arc<Queue>,
}

impl Channel {
    fn open(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Channel> {
        let weak = PyWeakrefReference::new(event_loop)?.unbind();
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            let (reader, writer) = std::os::unix::net::UnixDatagram::pair()?;
            reader.set_nonblocking(true)?;
            writer.set_nonblocking(true)?;
            let fd = reader.as_raw_fd();
            let queue = Arc::new(Queue {
                done: Mutex::new(Vec::new()),
                wake: Wake::Socket(writer),
            });
            let drainer = Drainer {
                queue: Arc::clone(&queue),
                reader: Some(reader),
            };
            // The loop keeps the drainer (and so the read end) until it is
            // closed. Windows' proactor loop has no add_reader
            // (NotImplementedError): fall back below.
            if event_loop
                .call_method1(intern!(py, "add_reader"), (fd, drainer))
                .is_ok()
            {
                return Ok(Channel {
                    event_loop: weak,
                    queue,
                });
            }
        }
        Ok(Channel {
            event_loop: weak.clone_ref(py),
            queue: Arc::new(Queue {
                done: Mutex::new(Vec::new()),
                wake: Wake::CallSoon(weak),
            }),
        })
    }
}

/// The channel of every event loop the asyncio API was used on, one per
/// loop for the process (every AsyncRedlock of a loop shares it). Locked
/// only with the GIL held and never while Python code runs (that code could
/// let another thread take the GIL and wait for this lock).
static CHANNELS: Mutex<Vec<Channel>> = Mutex::new(Vec::new());

/// The running loop and its queue.
fn current(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Arc<Queue>)> {
    static GET_RUNNING_LOOP: GILOnceCell<PyObject> = GILOnceCell::new();
    let running = GET_RUNNING_LOOP
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("asyncio")?.getattr("get_running_loop")?.unbind())
        })?
        .bind(py)
        .call0()?;
    let known = |channels: &[Channel]| {
        channels
            .iter()
            .find(|c| {
                c.event_loop
                    .bind(py)
                    .upgrade()
                    .is_some_and(|l| l.as_ptr() == running.as_ptr())
            })
            .map(|c| Arc::clone(&c.queue))
    };
    // The other loops' channels stay listed while their loops are asked
    // whether they are closed and this loop's channel is opened: that is
    // Python code, which may let another thread run, and that thread must
    // still find its own loop's channel here (taking the list out for the
    // while made it open a second one).
    let loops: Vec<Py<PyWeakrefReference>> = {
        let channels = CHANNELS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = known(&channels) {
            return Ok((running, found));
        }
        channels
            .iter()
            .map(|c| c.event_loop.clone_ref(py))
            .collect()
    };
    // A loop first seen: forget the closed ones, open this one's channel.
    // A loop already collected counts as closed.
    let closed: Vec<Py<PyWeakrefReference>> = loops
        .into_iter()
        .filter(|weak| {
            weak.bind(py).upgrade().map_or(true, |l| {
                l.call_method0(intern!(py, "is_closed"))
                    .and_then(|c| c.is_truthy())
                    .unwrap_or(true)
            })
        })
        .collect();
    let made = Channel::open(py, &running)?;
    let (found, forgotten) = {
        let mut channels = CHANNELS.lock().unwrap_or_else(PoisonError::into_inner);
        let (forgotten, kept): (Vec<Channel>, Vec<Channel>) =
            std::mem::take(&mut *channels).into_iter().partition(|c| {
                closed
                    .iter()
                    .any(|weak| weak.as_ptr() == c.event_loop.as_ptr())
            });
        *channels = kept;
        channels.push(made);
        (known(&channels), forgotten)
    };
    // Dropped outside the lock.
    drop(forgotten);
    let found = found.ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err("no channel for the running loop")
    })?;
    Ok((running, found))
}

/// How many delivery channels the process keeps for `event_loop` (one
/// once it was used; for the package's tests).
#[pyfunction]
pub(crate) fn _delivery_channels(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> usize {
    CHANNELS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|c| {
            c.event_loop
                .bind(py)
                .upgrade()
                .is_some_and(|l| l.as_ptr() == event_loop.as_ptr())
        })
        .count()
}

/// What cancelling the awaitable does to the operation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnCancel {
    /// Drop the Rust future (the client stops and undoes what it started).
    Abort,
    /// Let it run to its end (its result is dropped): a release.
    Finish,
}

/// Aborts the task when the future it resolves is cancelled.
#[pyclass(module = "redislock_native", frozen)]
struct AbortOnCancel(tokio::task::AbortHandle);

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, py: Python<'_>, future: &Bound<'_, PyAny>) {
        let cancelled = future
            .call_method0(intern!(py, "cancelled"))
            .and_then(|c| c.is_truthy())
            .unwrap_or(false);
        if cancelled {
            self.0.abort();
        }
    }
}

/// Where a task's outcome goes. A task that ends without one (it panicked,
/// or it was aborted) still resolves its future, with an exception, so that
/// no awaiting task can wait forever; a cancelled future ignores it.
struct Target {
    queue: Arc<Queue>,
    future: Option<PyObject>,
}

impl Target {
    fn deliver(&mut self, outcome: Outcome) {
        if let Some(future) = self.future.take() {
            self.queue.push(Completion { future, outcome });
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.deliver(Box::new(|_: Python<'_>| {
            Err(pyo3::exceptions::PyRuntimeError::new_err(
                "the lock operation ended without a result (a bug in the Rust client: please report it)",
            ))
        }));
    }
}

/// Runs `work` on the runtime; an `asyncio.Future` of the running loop that
/// resolves to what its outcome makes of the result.
pub(crate) fn spawn<'py, F, O>(
    py: Python<'py>,
    runtime: &tokio::runtime::Runtime,
    on_cancel: OnCancel,
    work: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = O> + Send + 'static,
    O: FnOnce(Python<'_>) -> PyResult<PyObject> + Send + 'static,
{
    let (event_loop, queue) = current(py)?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let mut target = Target {
        queue,
        future: Some(future.clone().unbind()),
    };
    let task = runtime.spawn(async move {
        let outcome = work.await;
        target.deliver(Box::new(outcome));
    });
    if on_cancel == OnCancel::Abort {
        future.call_method1(
            intern!(py, "add_done_callback"),
            (AbortOnCancel(task.abort_handle()),),
        )?;
    }
    Ok(future)
}

/// An `asyncio.Future` of the running loop already resolved to `value`.
pub(crate) fn ready(py: Python<'_>, value: PyObject) -> PyResult<Bound<'_, PyAny>> {
    let (event_loop, _) = current(py)?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    future.call_method1(intern!(py, "set_result"), (value,))?;
    Ok(future)
}
