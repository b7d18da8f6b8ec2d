//! What every tool is granted without asking, and the landlock ABI each kind of rule needs:
//! policy facts shared by the sandbox (which enforces them) and the reference (which documents
//! them).

/// System directories every tool may read and execute from: enough for ordinary dynamic
/// binaries, nothing more. Missing ones are skipped.
pub const DEFAULT_READ_EXEC: &[&str] = &["/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32"];

/// Files and directories every tool may read: the loader cache, locale, time zone and
/// certificate data, and the harmless device nodes. Missing ones are skipped.
pub const DEFAULT_READ: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/locale.alias",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
];

/// Paths every tool may write: only the null device, a sink.
pub const DEFAULT_WRITE_FILES: &[&str] = &["/dev/null"];

/// The lowest ABI with TCP port rules.
pub const ABI_NET: i32 = 4;
/// The lowest ABI with scopes (abstract Unix sockets, signals).
pub const ABI_SCOPES: i32 = 6;
