namespace gpureap::node {}
