namespace gpureap::findings {}
