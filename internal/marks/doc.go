// Package marks is the filesystem half of the trial boundary (protocol
// 4.9): a mark records the state of every entry under some paths, and
// keeps the content of some subtrees, in relayd's state directory;
// changes compares the tree with a mark by a stat walk; restore puts the
// kept subtrees back as they were.
//
//	store_linux.go    the store: marks' records and kept content, the budget
//	index.go          a mark's index: one record per entry, in walk order
//	walk_linux.go     the walk shared by mark and changes: by descriptor, no link followed, nothing opened that can block
//	list_linux.go     a directory's listing (getdents and an lstat per name), made ahead of a walk or a restore by a few goroutines
//	mark_linux.go     taking a mark
//	changes_linux.go  changes against a mark
//	restore_linux.go  restore by descriptor
//
// Every walk visits a directory's names in byte order, depth first, so
// that an index is sorted by ComparePaths and changes is one merge of
// two sorted streams: memory does not grow with the tree (the listings
// made ahead are a bounded few).
package marks
