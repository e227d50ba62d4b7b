//! Opening the user's editor (`KEEL_EDITOR`, `EDITOR`, else `vi`) on a file.

use std::path::Path;

use crate::error::Error;

/// The editor command line, as the user set it (it may carry flags: `code --wait`).
pub fn command() -> String {
    ["KEEL_EDITOR", "EDITOR"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|e| !e.trim().is_empty()))
        .unwrap_or_else(|| "vi".into())
}

/// Runs the editor on `path` with the terminal, and waits for it to exit.
pub async fn edit(path: &Path) -> Result<(), Error> {
    let editor = command();
    // Through the shell, as kubectl and git do, so that an editor with flags works; the path
    // goes as an argument, never into the script.
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("keelctl-editor")
        .arg(path)
        .status()
        .await
        .map_err(|e| Error::Editor(format!("cannot start the editor {editor:?}: {e}")))?;
    if !status.success() {
        return Err(Error::Editor(format!(
            "there was a problem with the editor {editor:?} ({status})"
        )));
    }
    Ok(())
}
