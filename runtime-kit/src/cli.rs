//! The command line every component shares: `--config FILE`, `--check`,
//! and `--run-as UID:GID` (the supervisor's, for the actors).

use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};
use ringtail_config::{ConfigError, Settings};

/// A component's arguments.
#[derive(Parser, Debug)]
#[command(version)]
pub struct ComponentArgs {
    /// The ringtail configuration file (TOML).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Only validate the configuration (this component's part) and exit.
    #[arg(long)]
    pub check: bool,
    /// Started as root: become this user and group first thing, before
    /// anything is read (the supervisor starts the actors so; see
    /// `users::become_user`).
    #[arg(long, value_name = "UID:GID")]
    pub run_as: Option<crate::users::UserIds>,
}

/// Parses the command line (exiting with clap's message on bad arguments);
/// `about` is the component's one-line description.
pub fn parse(about: &'static str) -> ComponentArgs {
    let matches = ComponentArgs::command().about(about).get_matches();
    ComponentArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Loads the settings, and starts logging unless only checking.
pub fn load(args: &ComponentArgs) -> Result<Settings, ConfigError> {
    let settings = Settings::load(args.config.as_deref())?;
    if !args.check {
        crate::logging::init(&settings.log.level);
    }
    Ok(settings)
}
