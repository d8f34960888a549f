fn main() {
    std::process::exit(overdue::cli::main());
}
