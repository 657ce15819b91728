namespace gpureap::proc {}
