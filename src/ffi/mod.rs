//! The thin, unsafe edge to the Redis modules API: calling an API function,
//! reading argument bytes, replying, and logging. Everything above this file
//! works with slices, integers and the core crate's types.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use redis_module::raw;

pub mod blocked;
pub mod call;
pub mod command;
pub mod fence;
pub mod io;
pub mod key;
pub mod lock_copy;
pub mod value;

pub type Ctx = *mut raw::RedisModuleCtx;
pub type RString = *mut raw::RedisModuleString;

/// Calls a Redis module API function by name: `Some(result)`, or `None` if
/// this server does not export it (checked at load for all we depend on).
macro_rules! rm {
    ($name:ident($($arg:expr),* $(,)?)) => {
        // SAFETY: the function pointers are filled once by RedisModule_Init
        // before any of our code runs, and every caller passes pointers that
        // Redis gave it for the duration of the callback.
        match unsafe { redis_module::raw::$name } {
            Some(function) => Some(unsafe { function($($arg),*) }),
            None => None,
        }
    };
}
pub(crate) use rm;

/// Runs `f` with the bytes of a Redis string that Redis keeps alive for the
/// current call (a key name in an event, a command argument); the slice
/// cannot outlive `f`.
pub fn with_bytes<R>(string: *const raw::RedisModuleString, f: impl FnOnce(&[u8]) -> R) -> R {
    f(bytes(string))
}

/// The bytes of a Redis string. Valid while Redis keeps the string alive;
/// private: above this file they are lent only for a call (`with_bytes`,
/// `with_argv`).
fn bytes<'a>(string: *const raw::RedisModuleString) -> &'a [u8] {
    if string.is_null() {
        return &[];
    }
    let mut len: usize = 0;
    match rm!(RedisModule_StringPtrLen(string, &mut len)) {
        Some(ptr) if !ptr.is_null() => {
            // SAFETY: Redis returns a pointer to `len` bytes owned by `string`.
            unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
        }
        _ => &[],
    }
}

/// Arguments kept on the stack up to this many (every valid `LOCK.*` call
/// fits): a heap allocation per command showed in the profile.
const INLINE_ARGS: usize = 8;

/// The command line as byte slices.
enum ArgvBytes<'a> {
    Inline([&'a [u8]; INLINE_ARGS], usize),
    Heap(Vec<&'a [u8]>),
}

/// A command's arguments, lent for the command's call only ([`with_argv`]).
pub struct Argv<'a> {
    strings: &'a [RString],
    bytes: ArgvBytes<'a>,
}

impl<'a> Argv<'a> {
    /// The arguments as bytes, the command name first.
    pub fn bytes(&self) -> &[&'a [u8]] {
        match &self.bytes {
            ArgvBytes::Inline(args, count) => args.get(..*count).unwrap_or(&[]),
            ArgvBytes::Heap(args) => args,
        }
    }

    /// The `index`-th argument as a Redis string (to open a key with).
    pub fn string(&self, index: usize) -> Option<RString> {
        self.strings.get(index).copied()
    }

    /// The arguments from `index` on as Redis strings (an inner command
    /// line to call); empty past the end.
    pub fn strings_from(&self, index: usize) -> &'a [RString] {
        self.strings.get(index..).unwrap_or(&[])
    }
}

/// Runs `f` with the arguments Redis passed to a command; they cannot
/// outlive `f`, which runs within the command's call.
pub fn with_argv<R>(argv: *mut RString, argc: c_int, f: impl for<'a> FnOnce(&Argv<'a>) -> R) -> R {
    with_argv_head(argv, argc, usize::MAX, f)
}

/// As [`with_argv`], but [`Argv::bytes`] holds only the first `head`
/// arguments (all of them when there are fewer): for a call that reads a
/// few and hands the rest on as Redis strings ([`Argv::strings_from`]),
/// each argument's bytes cost an API call.
pub fn with_argv_head<R>(
    argv: *mut RString,
    argc: c_int,
    head: usize,
    f: impl for<'a> FnOnce(&Argv<'a>) -> R,
) -> R {
    let count = usize::try_from(argc).unwrap_or(0);
    let strings: &[RString] = if argv.is_null() {
        &[]
    } else {
        // SAFETY: Redis passes `argc` valid string pointers in `argv`,
        // alive for the call; the slice is lent to `f` only.
        unsafe { std::slice::from_raw_parts(argv, count) }
    };
    let read = strings.get(..head).unwrap_or(strings);
    let bytes = if read.len() > INLINE_ARGS {
        ArgvBytes::Heap(read.iter().map(|&s| bytes(s)).collect())
    } else {
        let mut inline: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
        for (slot, &s) in inline.iter_mut().zip(read) {
            *slot = bytes(s);
        }
        ArgvBytes::Inline(inline, read.len())
    };
    f(&Argv { strings, bytes })
}

pub fn reply_integer(ctx: Ctx, value: i64) -> c_int {
    rm!(RedisModule_ReplyWithLongLong(ctx, value)).unwrap_or(raw::REDISMODULE_ERR as c_int)
}

pub fn reply_null(ctx: Ctx) -> c_int {
    rm!(RedisModule_ReplyWithNull(ctx)).unwrap_or(raw::REDISMODULE_ERR as c_int)
}

pub fn reply_ok(ctx: Ctx) -> c_int {
    rm!(RedisModule_ReplyWithSimpleString(ctx, c"OK".as_ptr()))
        .unwrap_or(raw::REDISMODULE_ERR as c_int)
}

pub fn reply_bulk(ctx: Ctx, value: &[u8]) -> c_int {
    rm!(RedisModule_ReplyWithStringBuffer(
        ctx,
        value.as_ptr().cast::<c_char>(),
        value.len()
    ))
    .unwrap_or(raw::REDISMODULE_ERR as c_int)
}

/// A map reply (RESP3), or a flat array of `pairs * 2` elements (RESP2).
pub fn reply_array(ctx: Ctx, len: usize) -> c_int {
    let len = std::ffi::c_long::try_from(len).unwrap_or(0);
    rm!(RedisModule_ReplyWithArray(ctx, len)).unwrap_or(raw::REDISMODULE_ERR as c_int)
}

pub fn reply_map(ctx: Ctx, pairs: usize) -> c_int {
    let len = std::ffi::c_long::try_from(pairs).unwrap_or(0);
    rm!(RedisModule_ReplyWithMap(ctx, len)).unwrap_or(raw::REDISMODULE_ERR as c_int)
}

/// An error reply; `message` starts with its code (`ERR …`, `WRONGTYPE …`).
pub fn reply_error(ctx: Ctx, message: &str) -> c_int {
    let message = CString::new(message.replace(['\0', '\r', '\n'], " "))
        .unwrap_or_else(|_| CString::from(c"ERR internal error"));
    rm!(RedisModule_ReplyWithError(ctx, message.as_ptr())).unwrap_or(raw::REDISMODULE_ERR as c_int)
}

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// The standard `ERR wrong number of arguments for '…' command`.
pub fn reply_wrong_arity(ctx: Ctx) -> c_int {
    rm!(RedisModule_WrongArity(ctx)).unwrap_or(raw::REDISMODULE_ERR as c_int)
}

pub fn log_warning(ctx: Ctx, message: &str) {
    log(ctx, c"warning", message);
}

fn log(ctx: Ctx, level: &std::ffi::CStr, message: &str) {
    if let Ok(message) = CString::new(message.replace('\0', " ")) {
        rm!(RedisModule_Log(
            ctx,
            level.as_ptr(),
            c"%s".as_ptr(),
            message.as_ptr()
        ));
    }
}

/// The server's cached time, microseconds: set when a command starts and
/// kept for every command inside the same `EXEC`, script or function.
/// `None` where the server has no such call (Redis 7.0).
pub fn cached_server_micros() -> Option<i64> {
    rm!(RedisModule_CachedMicroseconds())
}

/// The client's context flags (role, MULTI, Lua, loading, replicated...).
pub fn context_flags(ctx: Ctx) -> c_int {
    rm!(RedisModule_GetContextFlags(ctx)).unwrap_or(0)
}

pub fn has_flag(ctx: Ctx, flag: u32) -> bool {
    context_flags(ctx) & (flag as c_int) != 0
}

/// This node is a primary (so it decides expiry).
pub fn is_primary(ctx: Ctx) -> bool {
    has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_MASTER)
}

/// The server asks modules not to write or propagate now: clients are
/// paused (`CLIENT PAUSE WRITE|ALL`) or a `FAILOVER` is under way.
pub fn avoid_replica_traffic() -> bool {
    rm!(RedisModule_AvoidReplicaTraffic()).unwrap_or(0) != 0
}

/// A position in a scan of a database's keys (`RedisModule_Scan`).
pub struct ScanCursor(*mut raw::RedisModuleScanCursor);

impl ScanCursor {
    pub fn new() -> Option<ScanCursor> {
        let cursor = rm!(RedisModule_ScanCursorCreate())?;
        (!cursor.is_null()).then_some(ScanCursor(cursor))
    }

    /// One step of the scan of the selected database: calls `visit` with the
    /// name and the open key (not touched) of each key it returns. False
    /// once the scan has covered the database.
    pub fn step(&self, ctx: Ctx, mut visit: impl FnMut(&[u8], *mut raw::RedisModuleKey)) -> bool {
        type Visit<'a> = &'a mut dyn FnMut(&[u8], *mut raw::RedisModuleKey);
        extern "C" fn trampoline(
            _ctx: Ctx,
            name: RString,
            key: *mut raw::RedisModuleKey,
            data: *mut c_void,
        ) {
            // SAFETY: `data` is the `Visit` below, alive for the whole step.
            if let Some(visit) = unsafe { data.cast::<Visit>().as_mut() } {
                visit(bytes(name), key);
            }
        }
        let mut visit: Visit = &mut visit;
        let data = (&mut visit as *mut Visit).cast::<c_void>();
        rm!(RedisModule_Scan(ctx, self.0, Some(trampoline), data)).unwrap_or(0) != 0
    }
}

impl Drop for ScanCursor {
    fn drop(&mut self) {
        rm!(RedisModule_ScanCursorDestroy(self.0));
    }
}

/// Calls `visit` with the name and the open key of every key in the selected
/// database.
pub fn scan_keys(ctx: Ctx, mut visit: impl FnMut(&[u8], *mut raw::RedisModuleKey)) {
    if let Some(cursor) = ScanCursor::new() {
        while cursor.step(ctx, &mut visit) {}
    }
}

/// In a cluster, whether this node serves `name` now, as the cluster would
/// route a command for it: its slot is ours, and not being migrated away
/// with the key already gone (`RedisModule_Call` applies the same checks
/// that answer clients with MOVED or ASK, and refuses what they would
/// redirect). Always true outside a cluster.
pub fn serves_key(ctx: Ctx, name: RString) -> bool {
    if !has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_CLUSTER) {
        return true;
    }
    let reply = rm!(RedisModule_Call(
        ctx,
        c"EXISTS".as_ptr(),
        c"s".as_ptr(),
        name
    ))
    .unwrap_or(std::ptr::null_mut());
    if reply.is_null() {
        return false;
    }
    let is_error =
        rm!(RedisModule_CallReplyType(reply)) == Some(raw::REDISMODULE_REPLY_ERROR as c_int);
    rm!(RedisModule_FreeCallReply(reply));
    !is_error
}

/// One field of an `INFO` section, as bytes.
pub fn server_info_field(ctx: Ctx, section: &CStr, field: &CStr) -> Option<Vec<u8>> {
    let info = rm!(RedisModule_GetServerInfo(ctx, section.as_ptr()))?;
    if info.is_null() {
        return None;
    }
    let value = rm!(RedisModule_ServerInfoGetFieldC(info, field.as_ptr()))
        .filter(|value| !value.is_null())
        // SAFETY: a NUL-terminated string owned by `info`, copied before
        // `info` is freed below.
        .map(|value| unsafe { CStr::from_ptr(value) }.to_bytes().to_vec());
    rm!(RedisModule_FreeServerInfo(ctx, info));
    value
}

/// A sample for the server's latency monitor (`event`, `ms`); the server
/// keeps it only when it reaches `latency-monitor-threshold`.
pub fn latency_add_sample(event: &CStr, ms: i64) {
    rm!(RedisModule_LatencyAddSample(event.as_ptr(), ms));
}

pub fn selected_db(ctx: Ctx) -> i32 {
    rm!(RedisModule_GetSelectedDb(ctx)).unwrap_or(0)
}

pub fn select_db(ctx: Ctx, db: i32) -> bool {
    rm!(RedisModule_SelectDb(ctx, db)) == Some(raw::REDISMODULE_OK as c_int)
}

/// The fields of a `LOCK.APPLY key owner holds token wall-end-ms
/// [SHARED limit]` effect.
pub struct ApplyEffect<'a> {
    pub owner: &'a [u8],
    pub holds: u32,
    pub token: i64,
    pub wall_end_ms: i64,
    /// A shared lock's holder: `Some(limit)`, 0 for none.
    pub shared: Option<u32>,
}

/// `LOCK.APPLY name …` through a variadic API function (`Replicate` or
/// `EmitAOF`) on `target`: the format strings and their arguments kept
/// together, typed.
macro_rules! apply_effect {
    ($function:ident, $target:expr, $name:expr, $effect:expr) => {{
        let effect: &ApplyEffect<'_> = $effect;
        let owner = effect.owner.as_ptr().cast::<c_char>();
        let (len, holds) = (effect.owner.len(), i64::from(effect.holds));
        match effect.shared {
            None => rm!($function(
                $target,
                c"LOCK.APPLY".as_ptr(),
                c"sblll".as_ptr(),
                $name,
                owner,
                len,
                holds,
                effect.token,
                effect.wall_end_ms,
            )),
            Some(limit) => rm!($function(
                $target,
                c"LOCK.APPLY".as_ptr(),
                c"sblllcl".as_ptr(),
                $name,
                owner,
                len,
                holds,
                effect.token,
                effect.wall_end_ms,
                c"SHARED".as_ptr(),
                i64::from(limit),
            )),
        };
    }};
}

/// Replicates `LOCK.APPLY name …` (to replicas and the AOF).
pub fn replicate_apply(ctx: Ctx, name: RString, effect: &ApplyEffect<'_>) {
    apply_effect!(RedisModule_Replicate, ctx, name, effect);
}

/// Writes `LOCK.APPLY key …` into an AOF rewrite.
pub fn emit_aof_apply(aof: *mut raw::RedisModuleIO, key: RString, effect: &ApplyEffect<'_>) {
    apply_effect!(RedisModule_EmitAOF, aof, key, effect);
}

/// Replicates `LOCK.DROP name owner`: the owner's hold left a shared lock
/// that others still hold.
pub fn replicate_drop(ctx: Ctx, name: RString, owner: &[u8]) {
    rm!(RedisModule_Replicate(
        ctx,
        c"LOCK.DROP".as_ptr(),
        c"sb".as_ptr(),
        name,
        owner.as_ptr().cast::<c_char>(),
        owner.len()
    ));
}

/// Replicates `DEL name`.
pub fn replicate_del(ctx: Ctx, name: RString) {
    rm!(RedisModule_Replicate(
        ctx,
        c"DEL".as_ptr(),
        c"s".as_ptr(),
        name
    ));
}

/// Replicates `LOCK.COUNTER last`.
pub fn replicate_counter(ctx: Ctx, last: i64) {
    rm!(RedisModule_Replicate(
        ctx,
        c"LOCK.COUNTER".as_ptr(),
        c"l".as_ptr(),
        last
    ));
}

/// A timer callback.
pub type TimerCallback = extern "C" fn(Ctx, *mut c_void);

/// A context detached from any client, for timers made from callbacks that
/// have none; null if the server cannot make one.
pub fn detached_context(ctx: Ctx) -> Ctx {
    rm!(RedisModule_GetDetachedThreadSafeContext(ctx)).unwrap_or(std::ptr::null_mut())
}

/// Creates a timer that calls `callback` after `delay_ms`; its id.
pub fn create_timer(ctx: Ctx, delay_ms: u64, callback: TimerCallback) -> Option<u64> {
    rm!(RedisModule_CreateTimer(
        ctx,
        i64::try_from(delay_ms).unwrap_or(i64::MAX),
        Some(callback),
        std::ptr::null_mut()
    ))
}

/// Stops timer `id` (nothing if it already fired).
pub fn stop_timer(ctx: Ctx, id: u64) {
    rm!(RedisModule_StopTimer(ctx, id, std::ptr::null_mut()));
}

/// Propagates the calling command as it is (what Redis does with a change
/// that replicates nothing else: it counts it).
pub fn replicate_verbatim(ctx: Ctx) {
    rm!(RedisModule_ReplicateVerbatim(ctx));
}

/// A keyspace event `event` of `class` on key `name`.
pub fn notify_keyspace_event(ctx: Ctx, class: c_int, event: &CStr, name: RString) {
    rm!(RedisModule_NotifyKeyspaceEvent(
        ctx,
        class,
        event.as_ptr(),
        name
    ));
}

/// Adds the module's `INFO` section with these integer fields.
pub fn info_section(ctx: *mut raw::RedisModuleInfoCtx, fields: &[(&CStr, i64)]) {
    rm!(RedisModule_InfoAddSection(ctx, c"".as_ptr()));
    for (name, value) in fields {
        rm!(RedisModule_InfoAddFieldLongLong(ctx, name.as_ptr(), *value));
    }
}

/// Integer fields of an `INFO` section; `None` for a field that cannot be
/// read, and for all of them if the section cannot.
pub fn server_info_signed<const N: usize>(
    ctx: Ctx,
    section: &CStr,
    fields: [&CStr; N],
) -> [Option<i64>; N] {
    let info =
        rm!(RedisModule_GetServerInfo(ctx, section.as_ptr())).unwrap_or(std::ptr::null_mut());
    if info.is_null() {
        return [None; N];
    }
    let values = fields.map(|name| {
        let mut error: c_int = 0;
        rm!(RedisModule_ServerInfoGetFieldSigned(
            info,
            name.as_ptr(),
            &mut error
        ))
        .filter(|_| error == 0)
    });
    rm!(RedisModule_FreeServerInfo(ctx, info));
    values
}

/// A keyspace event callback.
pub type KeyspaceCallback = extern "C" fn(Ctx, c_int, *const c_char, RString) -> c_int;

/// Subscribes `callback` to the keyspace events of `classes`.
pub fn subscribe_keyspace_events(ctx: Ctx, classes: c_int, callback: KeyspaceCallback) -> bool {
    rm!(RedisModule_SubscribeToKeyspaceEvents(
        ctx,
        classes,
        Some(callback)
    )) == Some(raw::REDISMODULE_OK as c_int)
}

/// Runs `f` with the event name a keyspace notification hands over (empty
/// for null); the bytes cannot outlive `f`.
pub fn with_event_name<R>(event: *const c_char, f: impl FnOnce(&[u8]) -> R) -> R {
    if event.is_null() {
        return f(&[]);
    }
    // SAFETY: a NUL-terminated string Redis keeps alive for the callback.
    f(unsafe { CStr::from_ptr(event) }.to_bytes())
}

/// Whether a config-change event's data names `name` among the settings
/// that changed (false for data it cannot read).
pub fn config_changed(data: *mut c_void, name: &[u8]) -> bool {
    // SAFETY: Redis passes a RedisModuleConfigChange with the config event,
    // whose `config_names` holds `num_changes` NUL-terminated names, alive
    // for the callback.
    let Some(change) = (unsafe { data.cast::<raw::RedisModuleConfigChange>().as_ref() }) else {
        return false;
    };
    if change.config_names.is_null() {
        return false;
    }
    (0..change.num_changes as usize).any(|i| {
        // SAFETY: `i` is below `num_changes` (see above).
        let entry = unsafe { *change.config_names.add(i) };
        !entry.is_null()
            // SAFETY: a NUL-terminated name (see above).
            && unsafe { CStr::from_ptr(entry) }.to_bytes().eq_ignore_ascii_case(name)
    })
}

/// The database a `FLUSHDB` event flushed (-1: all), from its data.
pub fn flushed_db(data: *mut c_void) -> Option<i32> {
    // SAFETY: Redis passes a RedisModuleFlushInfo with the flush event.
    unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }.map(|info| info.dbnum)
}

/// What Redis passes with the SWAPDB event (not in the generated bindings).
#[repr(C)]
struct SwapDbInfo {
    version: u64,
    first: i32,
    second: i32,
}

/// The two databases a `SWAPDB` event swapped, from its data.
pub fn swapped_dbs(data: *mut c_void) -> Option<(i32, i32)> {
    // SAFETY: Redis passes a RedisModuleSwapDbInfo (laid out as above)
    // with the swapdb event.
    unsafe { data.cast::<SwapDbInfo>().as_ref() }.map(|info| (info.first, info.second))
}

pub type ServerEventCallback = extern "C" fn(Ctx, raw::RedisModuleEvent, u64, *mut c_void);

/// Subscribes `callback` to server event `id` (version 1 of its data).
pub fn subscribe_server_event(ctx: Ctx, id: u64, callback: ServerEventCallback) -> bool {
    let event = raw::RedisModuleEvent { id, dataver: 1 };
    rm!(RedisModule_SubscribeToServerEvent(
        ctx,
        event,
        Some(callback)
    )) == Some(raw::REDISMODULE_OK as c_int)
}

/// Removes the module's subscription to server event `id`.
pub fn unsubscribe_server_event(ctx: Ctx, id: u64) -> bool {
    let event = raw::RedisModuleEvent { id, dataver: 1 };
    rm!(RedisModule_SubscribeToServerEvent(ctx, event, None)) == Some(raw::REDISMODULE_OK as c_int)
}

/// Sets the module's options (`REDISMODULE_OPTIONS_*`).
pub fn set_module_options(ctx: Ctx, options: u32) {
    rm!(RedisModule_SetModuleOptions(ctx, options as c_int));
}

/// Valkey's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`: the module
/// copes with keys that arrive in a slot before the slot is ours
/// (`CLUSTER MIGRATESLOTS`, Valkey 9.0 and later).
pub const HANDLE_ATOMIC_SLOT_MIGRATION: u32 = 1 << 5;

/// Valkey's `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION`.
pub const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;

/// Valkey's `VALKEYMODULE_SUBEVENT_ATOMIC_SLOT_MIGRATION_IMPORT_COMPLETED`:
/// the slots imported are this node's now.
pub const SUBEVENT_SLOT_IMPORT_COMPLETED: u64 = 4;

/// Redis's `REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION` (Redis 8.4 and
/// later: `CLUSTER MIGRATION IMPORT`). Valkey numbers its events
/// independently (its 18 is another event).
pub const EVENT_CLUSTER_SLOT_MIGRATION: u64 = 18;

/// Redis's `REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_IMPORT_COMPLETED`.
pub const SUBEVENT_CLUSTER_SLOT_IMPORT_COMPLETED: u64 = 2;

/// Redis's `REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_MIGRATE_COMPLETED`:
/// the slots this node migrated are the target's now.
pub const SUBEVENT_CLUSTER_SLOT_MIGRATE_COMPLETED: u64 = 5;

/// Redis's `REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION_TRIM` (Redis 8.4 and
/// later): the keys of slots this node does not own (they left, or an
/// import failed) are being deleted.
pub const EVENT_CLUSTER_SLOT_MIGRATION_TRIM: u64 = 19;

/// Redis's `REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_TRIM_BACKGROUND`:
/// the slots' keys are taken out of the keyspace in this call and freed on
/// a background thread, with no per-key callback (`unlink2` is not
/// called). Redis's other trim method (`TRIM_STARTED` .. `TRIM_COMPLETED`,
/// on its main thread, chosen while clients track keys) deletes each key
/// as `DEL` does, through `unlink2`.
pub const SUBEVENT_CLUSTER_SLOT_TRIM_BACKGROUND: u64 = 2;

/// Redis's `REDISMODULE_NOTIFY_KEY_TRIMMED`: a key of a slot that left (or
/// of an import that failed) deleted by the server. While any module
/// listens to it, Redis trims such keys one by one on its main thread
/// (deleting them as `DEL` does, which calls our `unlink2`) instead of
/// freeing them on a background thread: every departed key, locks or not,
/// at the host's cost. Listened to only on a server that has the slot
/// migration event but not its trim event (`trim_by_notification`).
pub const NOTIFY_KEY_TRIMMED: c_int = 1 << 17;

/// Redis's `RedisModuleSlotRangeArray`: `num_ranges`, then that many
/// `RedisModuleSlotRange { uint16_t start, end }` inline.
#[repr(C)]
struct SlotRangeArray {
    num_ranges: i32,
    ranges: [SlotRange; 0],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct SlotRange {
    start: u16,
    end: u16,
}

/// Redis's `RedisModuleClusterSlotMigrationTrimInfoV1`.
#[repr(C)]
struct TrimInfo {
    version: u64,
    slots: *const SlotRangeArray,
}

/// Redis's `RedisModuleClusterSlotMigrationInfoV1` (`REDISMODULE_NODE_ID_LEN`
/// is 40).
#[repr(C)]
struct MigrationInfo {
    version: u64,
    source_node_id: [c_char; 41],
    destination_node_id: [c_char; 41],
    task_id: *const c_char,
    slots: *const SlotRangeArray,
}

/// The slot ranges of a `RedisModuleSlotRangeArray` (none for null; at
/// most as many as there are slots).
fn slot_ranges(array: *const SlotRangeArray) -> redis_lock_core::slot::SlotRanges {
    use redis_lock_core::slot::{SlotRanges, SLOTS};
    // SAFETY: Redis passes the array with the event, alive for the call.
    let Some(header) = (unsafe { array.as_ref() }) else {
        return SlotRanges::default();
    };
    let count = usize::try_from(header.num_ranges)
        .unwrap_or(0)
        .min(usize::from(SLOTS));
    // SAFETY: `num_ranges` ranges follow the count inline (a flexible
    // array member), and Redis never gives more than there are slots. The
    // pointer is taken from `array` itself, whose allocation holds them.
    let ranges = unsafe {
        let first = std::ptr::addr_of!((*array).ranges).cast::<SlotRange>();
        std::slice::from_raw_parts(first, count)
    };
    SlotRanges::new(ranges.iter().map(|range| (range.start, range.end)))
}

/// The slots a `CLUSTER_SLOT_MIGRATION_TRIM` event names, from its data.
pub fn trimmed_slots(data: *mut c_void) -> redis_lock_core::slot::SlotRanges {
    // SAFETY: Redis passes a RedisModuleClusterSlotMigrationTrimInfoV1 (laid
    // out as above) with the trim event.
    match unsafe { data.cast::<TrimInfo>().as_ref() } {
        Some(info) => slot_ranges(info.slots),
        None => Default::default(),
    }
}

/// The slots a `CLUSTER_SLOT_MIGRATION` event names, from its data.
pub fn migration_slots(data: *mut c_void) -> redis_lock_core::slot::SlotRanges {
    // SAFETY: Redis passes a RedisModuleClusterSlotMigrationInfoV1 (laid
    // out as above) with the slot migration event.
    match unsafe { data.cast::<MigrationInfo>().as_ref() } {
        Some(info) => slot_ranges(info.slots),
        None => Default::default(),
    }
}

/// Whether this server is Valkey 8 or later: it exports its API under
/// `ValkeyModule_` names as well (Redis does not).
fn is_valkey() -> bool {
    let mut function: *mut c_void = std::ptr::null_mut();
    let found = rm!(RedisModule_GetApi(
        c"ValkeyModule_GetModuleOptionsAll".as_ptr(),
        (&mut function as *mut *mut c_void).cast::<c_void>()
    )) == Some(raw::REDISMODULE_OK as c_int);
    found && !function.is_null()
}

/// Whether this server is Valkey and knows atomic slot migration:
/// `GetModuleOptionsAll` has the option's bit. Redis numbers its own
/// options and events independently, so neither the bit nor the event is
/// given to any other server.
pub fn has_atomic_slot_migration() -> bool {
    if !is_valkey() {
        return false;
    }
    // The same function under its Redis name, filled by RedisModule_Init.
    let all = rm!(RedisModule_GetModuleOptionsAll()).unwrap_or(0);
    all & HANDLE_ATOMIC_SLOT_MIGRATION as c_int != 0
}

/// Whether this server is Redis with its own atomic slot migration (Redis
/// 8.4 and later): not Valkey (whose events and notification bits are
/// numbered independently), and it has the slot migration event.
pub fn has_redis_slot_migration() -> bool {
    !is_valkey()
        && supports(
            EVENT_CLUSTER_SLOT_MIGRATION,
            SUBEVENT_CLUSTER_SLOT_IMPORT_COMPLETED,
        )
}

/// On a Redis with atomic slot migration: how the module learns that the
/// keys of slots it no longer owns leave. `false`: by the trim event,
/// which names the slots (`TRIM_BACKGROUND`); `true`: only by the
/// `key_trimmed` notification (a server with the migration event but not
/// the trim event, if one exists). `None`: by neither.
pub fn trim_by_notification() -> Option<bool> {
    if supports(
        EVENT_CLUSTER_SLOT_MIGRATION_TRIM,
        SUBEVENT_CLUSTER_SLOT_TRIM_BACKGROUND,
    ) {
        return Some(false);
    }
    let flags = rm!(RedisModule_GetKeyspaceNotificationFlagsAll()).unwrap_or(0);
    (flags & NOTIFY_KEY_TRIMMED != 0).then_some(true)
}

/// Whether the server knows sub-event `subevent` of event `id`.
fn supports(id: u64, subevent: u64) -> bool {
    let event = raw::RedisModuleEvent { id, dataver: 1 };
    rm!(RedisModule_IsSubEventSupported(event, subevent)).unwrap_or(0) != 0
}

/// Applies the `lock.*` settings from the server's configuration file and
/// the module's arguments.
pub fn load_configs(ctx: Ctx) {
    rm!(RedisModule_LoadConfigs(ctx));
}

pub type InfoCallback = extern "C" fn(*mut raw::RedisModuleInfoCtx, c_int);

/// Registers the module's `INFO` section.
pub fn register_info_func(ctx: Ctx, callback: InfoCallback) {
    rm!(RedisModule_RegisterInfoFunc(ctx, Some(callback)));
}

/// A Redis string owned by us, freed on drop.
pub struct OwnedString {
    ctx: Ctx,
    string: RString,
}

impl OwnedString {
    pub fn new(ctx: Ctx, value: &[u8]) -> Option<Self> {
        let string = rm!(RedisModule_CreateString(
            ctx,
            value.as_ptr().cast::<c_char>(),
            value.len()
        ))?;
        (!string.is_null()).then_some(OwnedString { ctx, string })
    }

    pub fn as_ptr(&self) -> RString {
        self.string
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        rm!(RedisModule_FreeString(self.ctx, self.string));
    }
}

/// The API functions the module cannot work without, checked at load so a
/// server too old for us refuses the module instead of misbehaving later.
pub fn missing_api() -> Option<&'static str> {
    macro_rules! require {
        ($($name:ident),* $(,)?) => {
            $(
                // SAFETY: reading a function pointer filled by RedisModule_Init.
                if unsafe { redis_module::raw::$name }.is_none() {
                    return Some(stringify!($name));
                }
            )*
        };
    }
    require!(
        RedisModule_CreateCommand,
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_DeleteKey,
        RedisModule_Replicate,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_CreateTimer,
        RedisModule_StopTimer,
        RedisModule_ReplyWithMap,
        RedisModule_SubscribeToKeyspaceEvents,
        RedisModule_SubscribeToServerEvent,
        RedisModule_GetKeyNameFromOptCtx,
        RedisModule_GetDbIdFromOptCtx,
        RedisModule_BlockClient,
        RedisModule_UnblockClient,
        RedisModule_SetDisconnectCallback,
        RedisModule_SelectDb,
        RedisModule_EmitAOF,
        RedisModule_ReplicateVerbatim,
        RedisModule_GetServerInfo,
        RedisModule_ServerInfoGetFieldSigned,
        RedisModule_FreeServerInfo,
        RedisModule_AvoidReplicaTraffic,
        RedisModule_SetModuleOptions,
        RedisModule_ServerInfoGetFieldC,
        RedisModule_IsIOError,
    );
    None
}
