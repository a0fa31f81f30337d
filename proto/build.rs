//! Compiles the contract with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "switchyard/plugin/v1/plugin.proto",
        "grpc/health/v1/health.proto",
    ];
    let fds = protox::compile(files, ["."])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=switchyard");
    println!("cargo:rerun-if-changed=grpc");
    Ok(())
}
