namespace gpureap::gpu {}
