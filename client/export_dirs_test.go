package client

// ExtractTar is the local side of DownloadDir, for archives a test makes.
var ExtractTar = extractTar
