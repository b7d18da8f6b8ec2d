//! `cordon`: see [`cordon_client::cli`].

#![forbid(unsafe_code)]

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    cordon_client::run(cordon_client::Cli::parse())
}
