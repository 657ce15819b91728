namespace gpureap::report {}
