namespace gpureap::container {}
