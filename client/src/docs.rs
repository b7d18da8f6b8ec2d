//! Shell completions and man pages, generated from the real clap definitions ([`crate::Cli`]),
//! so that they cannot drift from the flags. Packaging (`packaging/install.sh`) writes them at
//! build time; `cordon completions SHELL` also prints a script for a user's own shell setup.

use std::path::Path;

use clap::CommandFactory as _;

use crate::Cli;
use crate::error::CliError;

/// The shells `cordon completions` writes scripts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

/// `cordon completions SHELL`: the completion script on stdout.
pub fn completions(shell: Shell) -> Result<u8, CliError> {
    use clap_complete::shells;
    let mut cmd = Cli::command();
    // Generated into memory, then written through `stdio` (clap_complete panics when its writer
    // fails, e.g. on `cordon completions bash | head`).
    let mut out = Vec::new();
    match shell {
        Shell::Bash => clap_complete::generate(shells::Bash, &mut cmd, "cordon", &mut out),
        Shell::Zsh => clap_complete::generate(shells::Zsh, &mut cmd, "cordon", &mut out),
        Shell::Fish => clap_complete::generate(shells::Fish, &mut cmd, "cordon", &mut out),
        Shell::Elvish => clap_complete::generate(shells::Elvish, &mut cmd, "cordon", &mut out),
        Shell::Powershell => clap_complete::generate(shells::PowerShell, &mut cmd, "cordon", &mut out),
    }
    cordon_core::stdio::out_bytes(&out);
    Ok(0)
}

/// `cordon man --dir DIR` (hidden): writes cordon.1 and one page per visible subcommand
/// (cordon-run.1, cordon-policy-check.1, ...) into an existing directory.
pub fn man_pages(dir: &Path) -> Result<u8, CliError> {
    clap_mangen::generate_to(man_command(Cli::command()), dir).map_err(|e| {
        CliError::Other(format!(
            "cannot write the man pages into {}: {e}; give an existing, writable directory",
            dir.display()
        ))
    })?;
    Ok(0)
}

/// The command as its man page names it: `cordon - the admin CLI ...`, not `cordon - cordon: ...`
/// (the crate description starts with the binary's name, as `--help` shows it).
fn man_command(cmd: clap::Command) -> clap::Command {
    let prefix = format!("{}: ", cmd.get_name());
    let about = cmd.get_about().map(ToString::to_string);
    match about.as_deref().and_then(|a| a.strip_prefix(&prefix)) {
        Some(rest) => {
            let rest = rest.to_string();
            cmd.about(rest)
        }
        None => cmd,
    }
}
