//! `stockledger keys new`: a fresh API key for `serve --api-keys`.

use std::process::ExitCode;

use clap::Subcommand;
use stockledger_http::gateway::auth::{self, Role};

use super::table::Style;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Make a random token and print it once, with the stanza to add to the
    /// keys file (which keeps only the token's SHA-256).
    #[command(
        after_help = "Example:\n  stockledger keys new --name checkout --role producer\n\n\
        Give the token to the service (it sends Authorization: Bearer TOKEN),\n\
        append the stanza to the file serve --api-keys reads, and send the\n\
        gateway SIGHUP to take it up."
    )]
    New {
        /// The key's name, as the access log and the metrics show it
        /// (letters, digits, '.', '_', '-'; at most 64).
        #[arg(long, value_parser = parse_name)]
        name: String,
        /// What the key may do: producer (deduct, hold, confirm, rollback,
        /// read orders), operator (everything) or analyst (reads only).
        #[arg(long)]
        role: Role,
        /// The token and the stanza with comments, or one JSON object
        /// (`token`, `name`, `role`, `sha256`) for a script that files them.
        #[arg(long, value_enum, default_value = "text")]
        format: Style,
    },
}

fn parse_name(s: &str) -> Result<String, String> {
    auth::check_name(s).map(|()| s.to_owned())
}

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::New { name, role, format } => {
            let (token, digest) = auth::new_token();
            if format == Style::Json {
                let shown = serde_json::json!({
                    "token": token, "name": name, "role": role.to_string(), "sha256": digest,
                });
                println!("{shown}");
                return Ok(ExitCode::SUCCESS);
            }
            println!("# The token, shown this once: give it to the caller, store it as a secret.");
            println!("{token}");
            println!();
            println!(
                "# Add this to the keys file (serve --api-keys), then send the gateway SIGHUP:"
            );
            println!("[[keys]]");
            println!("name = \"{name}\"");
            println!("role = \"{role}\"");
            println!("sha256 = \"{digest}\"");
            Ok(ExitCode::SUCCESS)
        }
    }
}
