//! The suggestion of a learn run (`cordon run --learn DIR`, docs/learn.md): from the paths the
//! tool opened under each extra tree, the narrowest `read` and `exec` entries that cover them.
//!
//! Per tree and key, one entry: the one path opened (a file or a directory), or the deepest
//! directory that holds every path opened; never above the tree. Programs run need `exec` (it
//! grants reading too), so a `read` entry an `exec` entry already covers is left out.

use crate::api::Learned;

/// `path` is `tree` or beneath it.
pub(super) fn within(path: &str, tree: &str) -> bool {
    path == tree || path.strip_prefix(tree).is_some_and(|rest| rest.starts_with('/'))
}

/// The `read` and `exec` entries that would have allowed what the run opened, at most one of
/// each per tree.
pub(super) fn suggest(trees: &[String], learned: &[Learned]) -> (Vec<String>, Vec<String>) {
    let (mut read, mut exec) = (Vec::new(), Vec::new());
    for tree in trees {
        let under = learned.iter().filter(|l| within(&l.path, tree));
        let ran: Vec<&Learned> = under.clone().filter(|l| l.exec).collect();
        let opened: Vec<&Learned> = under.filter(|l| !l.exec).collect();
        let x = covering(&ran, tree);
        let r = covering(&opened, tree).filter(|r| !x.as_deref().is_some_and(|x| within(r, x)));
        exec.extend(x);
        read.extend(r);
    }
    (read, exec)
}

/// The one path, or the deepest directory holding them all (never above `tree`).
fn covering(paths: &[&Learned], tree: &str) -> Option<String> {
    let (first, rest) = paths.split_first()?;
    if rest.iter().all(|p| p.path == first.path) {
        return Some(first.path.clone());
    }
    // A directory opened is covered by itself, a file by the directory that holds it.
    let home = |l: &Learned| if l.dir { l.path.clone() } else { parent(&l.path).to_string() };
    let start = home(first);
    let mut common: Vec<&str> = start.split('/').collect();
    for p in rest {
        let other = home(p);
        let n = common.iter().zip(other.split('/')).take_while(|(a, b)| **a == *b).count();
        common.truncate(n);
    }
    let dir = common.join("/");
    Some(if within(&dir, tree) { dir } else { tree.to_string() })
}

/// The directory of `path` (`path` itself when it has none).
fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => path,
        Some(i) => &path[..i],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(path: &str, exec: bool, dir: bool) -> Learned {
        Learned { path: path.into(), read: !exec, exec, opens: 1, dir }
    }

    #[test]
    fn within_is_by_component() {
        assert!(within("/t/a", "/t"));
        assert!(within("/t", "/t"));
        assert!(!within("/tt/a", "/t"));
    }

    #[test]
    fn one_file_is_granted_itself_and_several_their_deepest_common_directory() {
        let trees = vec!["/t".to_string()];
        let one = suggest(&trees, &[l("/t/lib/a.so", false, false)]);
        assert_eq!(one, (vec!["/t/lib/a.so".to_string()], vec![]));
        let two = suggest(&trees, &[l("/t/lib/x/a.so", false, false), l("/t/lib/y/b.so", false, false)]);
        assert_eq!(two, (vec!["/t/lib".to_string()], vec![]));
        let dir_and_file = suggest(&trees, &[l("/t/lib", false, true), l("/t/lib/a", false, false)]);
        assert_eq!(dir_and_file, (vec!["/t/lib".to_string()], vec![]));
    }

    #[test]
    fn a_read_entry_under_the_exec_entry_is_left_out_and_nothing_goes_above_the_tree() {
        let trees = vec!["/t".to_string(), "/u".to_string()];
        let got = suggest(
            &trees,
            &[
                l("/t/bin/tool", true, false),
                l("/t/bin/tool.cfg", false, false),
                l("/u/a", false, false),
                l("/u/b/c", false, false),
            ],
        );
        // The program's own file is granted exec; what it read beside it (not beneath it), read.
        assert_eq!(got, (vec!["/t/bin/tool.cfg".to_string(), "/u".to_string()], vec!["/t/bin/tool".to_string()]));
        let under = suggest(&trees, &[l("/t/bin", true, false), l("/t/bin/x/y", false, false)]);
        assert_eq!(under, (vec![], vec!["/t/bin".to_string()]));
        let split = suggest(&trees, &[l("/t/bin/tool", true, false), l("/t/share/x", false, false)]);
        assert_eq!(split, (vec!["/t/share/x".to_string()], vec!["/t/bin/tool".to_string()]));
    }
}
