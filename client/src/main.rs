//! `cordon`: see [`cordon_client::cli`].

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    cordon_client::cli::main()
}
