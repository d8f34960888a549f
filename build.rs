// `sqlx::migrate!` embeds migrations/ at compile time; without this a new
// migration file is not seen by an incremental build (sqlx's documentation
// recommends it).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
