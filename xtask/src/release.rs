//! Placeholder: being written (see issue 3).

/// Arguments of this task.
#[derive(clap::Args)]
pub struct Args {}

impl Args {
    /// Runs the task.
    pub fn run(self) -> anyhow::Result<()> {
        anyhow::bail!("not implemented yet")
    }
}
