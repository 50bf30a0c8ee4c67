exports.x = 1
