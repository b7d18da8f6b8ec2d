//! Red-team attacks on secret sources (issue 30): a FIFO, a directory, a huge file, a symlinked
//! directory above the file, trailing newlines, a credential name that climbs out of
//! `$CREDENTIALS_DIRECTORY`. Each fails closed with its reason, never the value.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cordon_core::policy::{Host, load_sources};
use cordon_core::secret::{MAX_VALUE_LEN, Placement, SecretSource, check_value, read_source};

fn dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("secrets-red").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn write(path: &Path, bytes: &[u8]) -> PathBuf {
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_path_buf()
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    read_source(&SecretSource::File(path.to_path_buf()), None, nix_uid()).map(|v| v.to_vec())
}

/// This test's user (the owner of what it creates).
fn nix_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(env!("CARGO_TARGET_TMPDIR")).map(|m| m.uid()).unwrap_or(0)
}

#[test]
fn odd_files_fail_closed_with_their_reason() {
    let d = dir();
    // A FIFO: refused at once (opened non-blocking), never read.
    let fifo = d.path().join("fifo");
    let made = std::process::Command::new("mkfifo").arg("-m").arg("600").arg(&fifo).status().unwrap();
    assert!(made.success());
    let e = read(&fifo).unwrap_err();
    assert!(e.contains("is not a regular file"), "{e}");
    // A directory.
    let sub = d.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(read(&sub).unwrap_err().contains("is not a regular file"));
    // Too large (64 KiB and one byte), and exactly the limit.
    let big = write(&d.path().join("big"), &vec![b'a'; MAX_VALUE_LEN + 1]);
    assert!(read(&big).unwrap_err().contains("is larger than"), "too large");
    let full = write(&d.path().join("full"), &vec![b'a'; MAX_VALUE_LEN]);
    assert_eq!(read(&full).unwrap().len(), MAX_VALUE_LEN);
    // A directory above the file that is a symlink.
    let real = d.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    write(&real.join("tok"), b"v");
    std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
    let e = read(&d.path().join("link").join("tok")).unwrap_err();
    assert!(e.contains("is a symlink"), "{e}");
    // No reason shows the value.
    let secret = write(&d.path().join("secret"), b"sekrit-VALUE");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = read(&secret).unwrap_err();
    assert!(e.contains("0640") && !e.contains("sekrit"), "{e}");
}

#[test]
fn one_trailing_newline_is_dropped_and_no_more() {
    let d = dir();
    for (text, value) in [(&b"tok\n"[..], &b"tok"[..]), (b"tok\r\n", b"tok"), (b"tok", b"tok")] {
        let f = write(&d.path().join("t"), text);
        assert_eq!(read(&f).unwrap(), value, "{text:?}");
    }
    // Two newlines: the second stays, and no place takes a value with a line break in it.
    let f = write(&d.path().join("t"), b"tok\n\n");
    let v = read(&f).unwrap();
    assert_eq!(v, b"tok\n");
    for place in [Placement::Header("authorization".into()), Placement::BasicPassword, Placement::Query("k".into())] {
        let e = check_value("s", &v, &place).unwrap_err();
        assert!(e.contains("control character") && !e.contains("tok"), "{e}");
    }
    // Only a newline: empty, refused.
    let f = write(&d.path().join("t"), b"\n");
    assert!(read(&f).unwrap_err().contains("is empty"));
}

#[test]
fn a_credential_name_cannot_climb_out_of_the_credentials_directory() {
    for name in ["../etc/shadow", "a/b", "..", "."] {
        let text = format!(
            "version = 1\n\n[secrets.s]\nsource = {{ credential = \"{name}\" }}\nhosts = [\"api.test:443\"]\nheader = \
             \"Authorization\"\n"
        );
        let e = load_sources(&[(PathBuf::from("s.toml"), text)], &Host::new(false, 6)).unwrap_err().to_string();
        assert!(e.contains("invalid credential name"), "{name}: {e}");
    }
}
