fn main() {
    wasmspy::cli::main()
}
